"""Ctrl-C: during training a request to stop between steps, never in the middle of one (SIGTERM too: a scheduler's
preemption, `timeout`, `docker stop`; and a reader of the output that goes away, `gpt-train run ... | head`); while
serving, an interrupt, however the process was started."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
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
    second one raises KeyboardInterrupt at once, for a step (or an evaluation) that would take too long to end. An
    output whose reader has gone sets the flag too, in silence: there is nobody to tell."""

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


class _Descriptor(io.RawIOBase):
    """A file descriptor whose writes are dropped once its reader has gone, the loss told to `gone` once."""

    def __init__(self, fd: int, gone: Callable[[], None]) -> None:
        super().__init__()
        self.fd, self.gone, self.reader = fd, gone, True

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def write(self, data) -> int:
        if self.reader:
            try:
                return os.write(self.fd, data)
            except BrokenPipeError:
                self.reader = False
                self.gone()
        return len(data)


def _dropping(stream: io.TextIOWrapper, gone: Callable[[], None]) -> io.TextIOWrapper:
    """A text stream like `stream`, on its file descriptor, whose writes are dropped once its reader has gone."""
    buffered = io.BufferedWriter(_Descriptor(stream.fileno(), gone))
    modes = {"line_buffering": stream.line_buffering, "write_through": stream.write_through}
    return io.TextIOWrapper(buffered, encoding=stream.encoding, errors=stream.errors, **modes)


@contextlib.contextmanager
def stop_when_the_reader_goes() -> Iterator[None]:
    """Within the block, stdout and stderr drop what they are given once their reader has gone (a closed pipe), and
    that loss is a stop request: a run stops between steps with a checkpoint, where the write's BrokenPipeError would
    have ended it with none. Streams a caller has replaced (a test's) are kept."""
    streams = ("stdout", "stderr")
    before = {name: getattr(sys, name) for name in streams}
    if any(stream is None or stream is not getattr(sys, f"__{name}__") for name, stream in before.items()):
        yield
        return

    def gone() -> None:  # inside the stream's write: setting a flag is all it may do
        for request in _LISTENERS:
            request.requested = True

    try:
        replacements = {name: _dropping(stream, gone) for name, stream in before.items()}
    except (AttributeError, OSError, ValueError):  # not a file descriptor's text stream: left as it is
        yield
        return
    for name, stream in before.items():
        stream.flush()
        setattr(sys, name, replacements[name])
    try:
        yield
    finally:
        for name, stream in before.items():
            with contextlib.suppress(Exception):
                getattr(sys, name).flush()
            setattr(sys, name, stream)
