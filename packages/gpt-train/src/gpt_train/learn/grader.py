"""Grade a learner's kernel in float64, forward and backward, on `gpt-train verify`'s cases and the course's own
(`cases`), then in float32, the dtype a model computes in (its output's dtype the inputs', its values within
FP32_TOLERANCE), then what the step asks beyond the numbers: a backward of the learner's own, or no (T, T) tensor."""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gpt_core.testing import LargestTensor, Row
from gpt_core.testing.verification import compared
from gpt_train.kernels import first_failure, output_checked, verify_kernel
from gpt_train.learn import assembly, devices, generation_check, training_step_check
from gpt_train.learn.cases import SEED, Case, Outcome, cases_for, close, in_float32, run_case, try_case
from gpt_train.learn.loading import AUTOGRAD_OFF, LearnerError, describe, guarded, learner_function, load_module, where
from gpt_train.learn.steps import Step
from gpt_train.learn.verdicts import Malformed, Verdict, grade_runs, judge, same_error
from gpt_train.learn.watch import Watch
from gpt_train.learn.zoo import MISTAKES, Mistake
from gpt_train.verify import FP32_TOLERANCE

FLASH_POSITIONS, FLASH_HEAD = 512, 16
LARGEST_TILE = 128  # the tiled step refuses a tensor larger than this square or the inputs: (T, T) is 16 times it
DEFAULT_TILE = 64
CHECKS = {"module": assembly, "training": training_step_check, "generation": generation_check}  # by kind of step

CHECK_MODULES = (
    "gpt_train.learn.grader", "gpt_train.learn.assembly", "gpt_train.learn.training_step_check",
    "gpt_train.learn.generation_check", "gpt_train.learn.cases", "gpt_train.learn.zoo",
    "gpt_train.learn.watch", "gpt_train.learn.loading", "gpt_train.learn.verdicts", "gpt_train.learn.devices",
    "gpt_train.kernels", "gpt_train.verify", "gpt_train.optimisation", "gpt_core.generate",
    "gpt_core.testing.verification",
)  # fmt: skip
"""The modules that grade the learner's code: a name in one replaced by it (`grader.first_failure = ...`) fails."""


def check_file(step: Step, path: Path, source: bytes | None = None) -> Verdict:
    """Load the learner's file for `step` (from `source`, its bytes as read, when given) and grade its function."""
    parts = _check_parts()
    try:
        module = load_module(path, source)
        kernel = learner_function(module, path, step.function, step.parameters)
    except LearnerError as error:
        return Verdict(False, str(error))
    verdict = grade(step, kernel, path, tile=getattr(module, "TILE", DEFAULT_TILE))
    replaced = [name for name, value in _check_parts().items() if parts.get(name, value) is not value]
    for name in replaced:  # put back, for the next check in this process
        module, _, attribute = name.rpartition(".")
        setattr(sys.modules[module], attribute, parts[name])
    if replaced:
        return Verdict(False, f"{path}: it replaced {replaced[0]}, a part of the check: leave the grader alone")
    return verdict


def _check_parts() -> dict[str, object]:
    return {f"{name}.{attribute}": value for name in CHECK_MODULES if name in sys.modules
            for attribute, value in vars(sys.modules[name]).items()}  # fmt: skip


def grade(step: Step, kernel: Callable[..., Tensor], path: Path | None = None, tile: int = DEFAULT_TILE) -> Verdict:
    """Grade `kernel` (for a module step, the class) as the answer to `step`; `path` is its file, for the verdict."""
    if step.kind == "module":  # trained on the GPU by `learn train`, as the kernels are
        return grade_runs(assembly, step, kernel, path, lambda: assembly.off_device(step, kernel, path))
    if step.kind != "kernel":
        return grade_runs(CHECKS[step.kind], step, kernel, path)
    unwrapped = kernel  # the learner's own function, for the device check, which needs no watch or wrapper
    watch = Watch(step.forbidden)
    kernel = _checked_return(watch.watched(kernel), step.function)  # the watch on in every call of it
    kernel = output_checked(kernel)  # an output on another device, sparse or a subclass: the kernel's failure
    in_float64 = cases_for(step.function, SEED)
    cases = in_float64 + in_float32(in_float64)
    with watch.on():  # the backward of the learner's output is the learner's too
        outcomes = [try_case(kernel, case, SEED) for case in cases]
    expected = [run_case(case.reference, case, SEED) for case in cases]
    kernel = guarded(kernel)  # from here a SystemExit is the kernel failing a check, as any exception is
    n = len(in_float64)
    if (raised := _raised_in_float32_alone(step, outcomes[:n], outcomes[n:], path)) is not None:
        return Verdict(False, raised)
    rows: list[Row] = []
    rows_float32: list[Row] = []

    def malformed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
        return _malformed(step, cases, outcomes, expected)

    def difference(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
        rows.extend(verify_kernel(step.slot, kernel, seed=SEED))  # the checks `run --kernel` makes, then the course's
        rows.extend(_rows(step, cases[:n], outcomes[:n], expected[:n]))
        if (failure := first_failure(rows)) is not None:
            return failure
        rows_float32.extend(dataclasses.replace(row, component=f"{row.component}, in float32")
                            for row in verify_kernel(step.slot, kernel, SEED, torch.float32))  # fmt: skip
        rows_float32.extend(_rows(step, cases[n:], outcomes[n:], expected[n:]))
        return first_failure(rows_float32, FP32_TOLERANCE)

    def passed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str:
        largest, largest_float32 = (max(max(row.forward, row.grad or 0.0) for row in some)
                                    for some in (rows, rows_float32))  # fmt: skip
        return (f"{len(rows)} checks forward and backward in float64, largest difference {largest:.1e}, and "
                f"{len(rows_float32)} in float32, largest difference {largest_float32:.1e}")  # fmt: skip

    return judge(step, path, watch, outcomes, expected, lambda: diagnose(step, outcomes[:n], expected[:n], tile),
                 malformed, difference, passed, lambda: _requirement_unmet(step, kernel, cases),
                 lambda: _off_device(step, unwrapped, cases[n:], path))  # fmt: skip


def _raised_in_float32_alone(step: Step, in_float64: list[Outcome], in_float32: list[Outcome],
                             path: Path | None) -> str | None:  # fmt: skip
    """What the kernel raised on float32 inputs where it ran on float64 ones (a float64 tensor of its own meeting
    them), in one line naming the line."""
    error = next((outcome.error for outcome in in_float32 if outcome.error is not None), None)
    if error is None or isinstance(error, Malformed) or any(outcome.error is not None for outcome in in_float64):
        return None
    return (
        f"{where(error, path)}: {step.function} raised {describe(error)} on float32 inputs, where float64 ones "
        "run: make each tensor it creates in the inputs' dtype (dtype=x.dtype), not float64"
    )


def _checked_return(kernel: Callable[..., Any], function: str) -> Callable[..., Any]:
    """`kernel`, raising Malformed when it returns None (a body that computes and never returns), and a RuntimeError
    (autograd back on) when it returns with autograd switched off, so the checks' own gradients never fail."""

    @functools.wraps(kernel)
    def call(*args: Any) -> Any:
        enabled = torch.is_grad_enabled()
        output = kernel(*args)
        if enabled and not torch.is_grad_enabled():
            torch.set_grad_enabled(True)
            raise RuntimeError(f"{AUTOGRAD_OFF}; a kernel leaves it as it found it")
        if output is None:
            raise Malformed(f"your {function} returns None: `return` the result")
        return output

    return call


def _dtype(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _leaf_names(step: Step, case: Case) -> list[str]:
    return [name for name, arg in zip(step.parameters, case.args, strict=False)
            if isinstance(arg, Tensor) and arg.requires_grad]  # fmt: skip


def _malformed(step: Step, cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    """What is wrong before any value: the dtype (in float64 and in float32), the shape, a detached output, a
    hand-written gradient of None."""
    fn = step.function
    for case, got, want in zip(cases, outcomes, expected, strict=True):
        output, right = got.output, want.output
        if output.dtype != right.dtype:
            return (f"your {fn} returns {_dtype(output)} for {_dtype(right)} inputs: keep the inputs' dtype (no "
                    ".float() or .double(); dtype=x.dtype for a tensor you make)")  # fmt: skip
        if output.shape != right.shape:
            return f"your {fn} returns shape {tuple(output.shape)} where {tuple(right.shape)} is expected ({case.name})"
        if not got.grads:
            return ("your output is detached from its inputs, so no gradient can flow (a .detach(), .item(), "
                    "torch.no_grad() or torch.tensor() of a result on the way)")  # fmt: skip
    for case, got, want in zip(cases, outcomes, expected, strict=True):
        for name, grad, right in zip(_leaf_names(step, case), got.grads, want.grads, strict=True):
            if step.handwritten_backward and grad is None and right is not None:
                return f"your backward returns None for the gradient of {name}: return one gradient per input"
    return None


def _rows(step: Step, cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> list[Row]:
    """The course's cases as `verify`'s rows, each difference over max(1, the reference's largest |value|)."""
    rows = []
    for case, got, want in zip(cases, outcomes, expected, strict=True):
        grads = zip(_leaf_names(step, case), got.grads, want.grads, strict=True)
        gradients = [(f"gradient of {name}", ours, theirs) for name, ours, theirs in grads if theirs is not None]
        outputs = [("output", got.output, want.output)]
        rows.append(compared(f"{step.function}, {case.name}", case.label, outputs, gradients, True))
    return rows


def diagnose(step: Step, outcomes: list[Outcome], expected: list[Outcome], tile: int = DEFAULT_TILE) -> Mistake | None:
    """The first of the step's mistakes whose kernel agrees with the learner's on every case (or whose `matches`
    says so)."""
    cases = cases_for(step.function, SEED)
    for mistake in MISTAKES.get(step.name, ()):
        if mistake.matches is not None:
            if mistake.matches(cases, outcomes, expected):
                return mistake
            continue
        for variant in mistake.kernels:
            made = functools.partial(variant, tile=tile) if mistake.tiled else variant
            if all(_agree(got, try_case(made, case, SEED), mistake.backward)
                   for got, case in zip(outcomes, cases, strict=True)):  # fmt: skip
                return mistake
    return None


def _agree(got: Outcome, mistaken: Outcome, with_gradients: bool) -> bool:
    if got.error is not None or mistaken.error is not None:
        return same_error(got.error, mistaken.error)
    pairs = [(got.output, mistaken.output)]
    if with_gradients:
        if len(got.grads) != len(mistaken.grads):
            return False
        pairs += list(zip(got.grads, mistaken.grads, strict=True))
    return all(close(a, b) for a, b in pairs)


def _requirement_unmet(step: Step, kernel: Callable[..., Tensor], cases: list[Case]) -> str | None:
    if step.handwritten_backward:
        return _autograd_derived(kernel, cases)
    if step.tiled:
        return _forms_square(kernel)
    return None


def _off_device(step: Step, kernel: Callable[..., Tensor], cases: list[Case], path: Path | None) -> str | None:
    """Whether the kernel, forward and backward, meets its inputs with a tensor on the CPU once they are on another
    device (`devices`), on each case in float32, the dtype a model trains in."""

    def call(case: Case, watch: devices.DeviceWatch) -> None:
        args = [devices.on_device(arg) for arg in case.args]
        devices.backward(kernel(*args), [arg for arg in args if isinstance(arg, Tensor)])

    return devices.off_device(step, [functools.partial(call, case) for case in cases], path)


def _autograd_derived(kernel: Callable[..., Tensor], cases: list[Case]) -> str | None:
    """Why the kernel's gradient is autograd's: on some case (a branch of its own: no bias, not causal, float32), an
    input reached from the output without a torch.autograd.Function."""
    for case in cases:
        pending, seen = [kernel(*case.args).grad_fn], set()
        while pending:
            node = pending.pop()
            if node is None or node in seen or isinstance(node, torch.autograd.function.BackwardCFunction):
                continue
            seen.add(node)
            if type(node).__name__ == "AccumulateGrad":
                return (f"autograd derived this backward ({case.name}): write the gradient yourself in a "
                        "torch.autograd.Function (forward and backward staticmethods) and return "
                        "YourFunction.apply(...)")  # fmt: skip
            pending += [next_node for next_node, _ in node.next_functions]
    return None


def _forms_square(kernel: Callable[..., Tensor]) -> str | None:
    """Why the kernel is not tiled: it made a tensor the size of the (T, T) scores."""
    n, d = FLASH_POSITIONS, FLASH_HEAD
    gen = torch.Generator().manual_seed(SEED)
    q, k, v = (
        torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64, device="cpu", requires_grad=True) for _ in range(3)
    )
    bound = max(LARGEST_TILE**2, n * d)
    with LargestTensor() as forward:
        out = kernel(q, k, v, True)
    with LargestTensor() as backward:
        out.sum().backward()
    for what, watch in (("forward", forward), ("backward", backward)):
        if watch.largest > bound:
            side = math.isqrt(watch.largest)
            return (f"the {what} made a tensor of {watch.largest:,} elements at T = {n} (about {side} x {side}): "
                    f"work in tiles of at most {LARGEST_TILE} x {LARGEST_TILE}, never the T x T scores")  # fmt: skip
    return None
