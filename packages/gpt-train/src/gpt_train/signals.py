"""Ctrl-C: during training a request to stop between steps, never in the middle of one; while serving, an
interrupt, however the process was started."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def sigint_handled_by(handler: Callable) -> Iterator[None]:
    """Within the block, SIGINT calls `handler` (outside the main thread, signals are left alone)."""
    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class StopRequest:
    """Turns SIGINT into a flag the loop checks between steps, so a stop never tears a step in half."""

    def __init__(self) -> None:
        self.requested = False

    def installed(self) -> contextlib.AbstractContextManager[None]:
        return sigint_handled_by(lambda signum, frame: setattr(self, "requested", True))


def ctrl_c_interrupts() -> contextlib.AbstractContextManager[None]:
    """Within the block, SIGINT raises KeyboardInterrupt, even in a process started with SIGINT ignored."""
    return sigint_handled_by(signal.default_int_handler)
