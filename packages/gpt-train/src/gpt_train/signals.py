"""Ctrl-C: during training a request to stop between steps, never in the middle of one (SIGTERM too: a scheduler's
preemption, `timeout`, `docker stop`); while serving, an interrupt, however the process was started."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def signals_handled_by(handler: Callable, signums: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[None]:
    """Within the block, each of `signums` calls `handler` (outside the main thread, signals are left alone)."""
    try:
        previous = {signum: signal.signal(signum, handler) for signum in signums}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


class StopRequest:
    """Turns SIGINT and SIGTERM into a flag the loop checks between steps, so a stop never tears a step in half; a
    second one raises KeyboardInterrupt at once, for a step (or an evaluation) that would take too long to end."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.requested = False
        self.say = say  # told once, at the first request

    def installed(self) -> contextlib.AbstractContextManager[None]:
        def stop(signum, frame) -> None:
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
            if self.say is not None:
                self.say("stopping after this step, with a checkpoint; Ctrl-C again stops at once")

        return signals_handled_by(stop, (signal.SIGINT, signal.SIGTERM))


def ctrl_c_interrupts() -> contextlib.AbstractContextManager[None]:
    """Within the block, SIGINT raises KeyboardInterrupt, even in a process started with SIGINT ignored."""
    return signals_handled_by(signal.default_int_handler)
