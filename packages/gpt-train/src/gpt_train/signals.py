"""Ctrl-C during training: a request to stop between steps, never in the middle of one."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class StopRequest:
    """Turns SIGINT into a flag the loop checks between steps, so a stop never tears a step in half."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        def handler(signum, frame):
            self.requested = True

        try:
            previous = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: leave signals alone
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_interrupts() -> Iterator[None]:
    """Within the block, SIGINT raises KeyboardInterrupt, even in a process started with SIGINT ignored (which
    Python then leaves ignored): a command that says "Ctrl-C stops it" keeps its word however it was launched."""
    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
