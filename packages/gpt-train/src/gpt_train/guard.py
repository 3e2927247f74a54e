"""A chosen kernel that fails is a failure of that kernel, in one line: its SystemExit (which would end the process,
0 for `sys.exit(0)`) becomes a KernelExit, an error while a run computes with it a KernelFailure."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gpt_train.errors import TrainError


class KernelExit(TrainError):
    """A chosen kernel called sys.exit (raised SystemExit) while it computed."""


class KernelFailure(TrainError):
    """A run with chosen kernels failed while its model computed: where, with which kernels, and the error."""


def _rewrapped(kernel: Callable[..., Any], caught: type[BaseException], failure: Callable[[Any], TrainError]):

    @functools.wraps(kernel)
    def wrapped_kernel(*args: Any, **kwargs: Any) -> Any:
        try:
            return kernel(*args, **kwargs)
        except TrainError:
            raise
        except caught as error:
            raise failure(error) from None

    return wrapped_kernel


def guarded(slot: str, name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    return _rewrapped(
        kernel, SystemExit, lambda exit_: KernelExit(f"kernel {slot}={name} called sys.exit({exit_.code!r})")
    )


def failures_named(slot: str, name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    said = lambda error: f"kernel {slot}={name} failed: {type(error).__name__}: {' '.join(str(error).split())}"
    return _rewrapped(kernel, Exception, lambda error: KernelFailure(said(error)))


def exit_origin(exit_: SystemExit) -> str:
    """Where an unguarded SystemExit was raised: `module:function`, or the module whose import called it."""
    frame = None
    traceback = exit_.__traceback__
    while traceback is not None:  # the innermost Python frame: the code that called sys.exit
        frame, traceback = traceback.tb_frame, traceback.tb_next
    if frame is None:
        return "sys.exit"
    module, function = frame.f_globals.get("__name__", "?"), frame.f_code.co_name
    return f"importing {module}" if function == "<module>" else f"{module}:{function}"
