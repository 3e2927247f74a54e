"""A chosen kernel that fails is a failure of that kernel, said in one line, not the end of the program.

`SystemExit` is no `Exception`: from a kernel it would pass the verification harness and the training loop and
end the process with the kernel's exit status, 0 for `sys.exit(0)`, with nothing checked or trained. `guarded`
turns it into a KernelExit naming the kernel (Ctrl-C is left alone: it is the user's). An error while a run
computes with chosen kernels becomes a KernelFailure naming them (`kernel_failure`, `failures_named`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpt_train.errors import TrainError


class KernelExit(TrainError):
    """A chosen kernel called sys.exit (raised SystemExit) while it computed."""


class KernelFailure(TrainError):
    """A run with chosen kernels failed while its model computed: where, with which kernels, and the error."""


def _rewrapped(kernel: Callable[..., Any], caught: type[BaseException], failure: Callable[[Any], TrainError]):
    """`kernel`, computing the same, with what it raises of `caught` (gpt-train's own errors aside) as `failure`."""

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
    """`kernel`, with a SystemExit it raises turned into a KernelExit naming it."""
    return _rewrapped(
        kernel, SystemExit, lambda exit_: KernelExit(f"kernel {slot}={name} called sys.exit({exit_.code!r})")
    )


def failures_named(slot: str, name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel`, with an exception it raises turned into a KernelFailure naming it."""
    said = lambda error: f"kernel {slot}={name} failed: {type(error).__name__}: {' '.join(str(error).split())}"
    return _rewrapped(kernel, Exception, lambda error: KernelFailure(said(error)))


def exit_origin(exit_: SystemExit) -> str:
    """Where a SystemExit that escaped every guard was raised, for a one-line error: `module:function`,
    as --kernel names a kernel, or the module whose import called it."""
    frame = None
    traceback = exit_.__traceback__
    while traceback is not None:  # the innermost Python frame: the code that called sys.exit
        frame, traceback = traceback.tb_frame, traceback.tb_next
    if frame is None:
        return "sys.exit"
    module, function = frame.f_globals.get("__name__", "?"), frame.f_code.co_name
    return f"importing {module}" if function == "<module>" else f"{module}:{function}"


def kernel_failure(
    what: str, error: Exception, kernels: Mapping[str, str], unverified: Iterable[str], kept: str
) -> KernelFailure:
    """The one line for `error` raised during `what` (a step, an evaluation) of a run computing with `kernels`;
    `kept` says where the run can resume from."""
    unverified = set(unverified)
    chosen = [f"{slot}={name}" + " (unverified)" * (slot in unverified) for slot, name in kernels.items()]
    return KernelFailure(
        f"{what} failed computing with kernel{'s' * (len(chosen) > 1)} {', '.join(chosen)}: "
        f"{type(error).__name__}: {' '.join(str(error).split())}; stopped ({kept})"
    )
