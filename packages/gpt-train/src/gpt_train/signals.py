"""Ctrl-C: during training a request to stop between steps, never in the middle of one (SIGTERM too: a scheduler's
preemption, `timeout`, `docker stop`; and a reader of the progress bar that goes away, `gpt-train run ... 2>&1 |
head`); while serving, an interrupt, however the process was started."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TextIO


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


REPEAT_GRACE = 0.5
"""Seconds after a stop request in which another signal is the same request, not a second one: `timeout` sends its
SIGTERM twice, to the process and then to its process group, a few milliseconds apart or more on a busy machine."""


class StopRequest:
    """Turns SIGINT and SIGTERM into a flag the loop checks between steps, so a stop never tears a step in half; a
    second one (REPEAT_GRACE or more after the first) raises KeyboardInterrupt at once, for a step (or an evaluation)
    that would take too long to end. An output whose reader has gone sets the flag too, in silence: there is nobody
    to tell."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.requested = False
        self.requested_at: float | None = None  # when a signal asked, on the monotonic clock
        self.say = say  # told once, at the first request

    def installed(self) -> contextlib.AbstractContextManager[None]:
        def stop(signum, frame) -> None:
            now = time.monotonic()
            if self.requested and self.requested_at is not None and now - self.requested_at < REPEAT_GRACE:
                return  # the first request, sent again
            if self.requested:
                raise KeyboardInterrupt
            self.requested, self.requested_at = True, now
            if self.say is not None:
                self.say("stopping after this step, with a checkpoint; Ctrl-C again stops at once")

        return _listening(self, signals_handled_by(stop, (signal.SIGINT, signal.SIGTERM)))


_LISTENERS: list[StopRequest] = []  # the stop requests a lost reader sets


@contextlib.contextmanager
def _listening(request: StopRequest, handled: contextlib.AbstractContextManager[None]) -> Iterator[None]:
    _LISTENERS.append(request)
    try:
        with handled:
            yield
    finally:
        _LISTENERS.remove(request)


def ctrl_c_interrupts() -> contextlib.AbstractContextManager[None]:
    """Within the block, SIGINT and SIGTERM raise KeyboardInterrupt, even in a process started with SIGINT ignored:
    what a Ctrl-C stops cleanly, a scheduler's SIGTERM stops the same way instead of killing the process."""
    return signals_handled_by(signal.default_int_handler, (signal.SIGINT, signal.SIGTERM))


class _Dropping:
    """`stream`, whose writes go nowhere once its reader has gone: its file descriptor is pointed at the null device,
    so what is still buffered flushes there too, and `gone` is told, once. Every other attribute is the stream's."""

    def __init__(self, stream: TextIO | BinaryIO, gone: Callable[[], None]) -> None:
        self.stream, self.gone, self.fd = stream, gone, stream.fileno()
        if isinstance(getattr(stream, "buffer", None), io.IOBase):  # click writes there for an ASCII locale
            self.buffer = _Dropping(stream.buffer, gone)

    def write(self, text: str | bytes) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._lost()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._lost()

    def _lost(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self.fd)
        os.close(null)
        self.gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def stop_when_the_reader_goes() -> Iterator[None]:
    """Within the block, stdout and stderr write nowhere once their reader has gone (a closed pipe), and that loss is
    a stop request: a run stops between steps with a checkpoint, where the write's BrokenPipeError would have ended
    it with none. Streams a caller has replaced (a test's) are kept."""
    streams = ("stdout", "stderr")
    before = {name: getattr(sys, name) for name in streams}
    if any(stream is None or stream is not getattr(sys, f"__{name}__") for name, stream in before.items()):
        yield
        return

    def gone() -> None:
        for request in _LISTENERS:
            request.requested = True
            request.requested_at = request.requested_at or time.monotonic()  # `timeout ... | head`: one request

    try:
        replacements = {name: _Dropping(stream, gone) for name, stream in before.items()}
    except (AttributeError, OSError, ValueError):  # not a file descriptor's stream: left as it is
        yield
        return
    for name in streams:
        setattr(sys, name, replacements[name])
    try:
        yield
    finally:
        for name, stream in before.items():
            with contextlib.suppress(Exception):
                getattr(sys, name).flush()
            setattr(sys, name, stream)
