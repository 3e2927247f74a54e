"""Grade a learner's kernel: in float64, forward and backward, on `gpt-train verify`'s cases, and when it
fails, say what is wrong by naming the classic mistake its results agree with.

The order: run it on the diagnosis cases (an unwritten stub or an exception is one line naming the file and
line), pin it against PyTorch with `gpt_train.kernels.verify_kernel` (the check `run --kernel` makes), name
the mistake it matches or else the first failing case, output and index; then what the step asks beyond
the numbers: a backward of the learner's own, or no (T, T) tensor.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from gpt_core import Row
from gpt_core.testing import LargestTensor
from gpt_train.kernels import first_failure, output_checked, verify_kernel
from gpt_train.learn.cases import Outcome, cases_for, run_case
from gpt_train.learn.loading import LearnerError, describe, guarded, is_stub, learner_function, load_module, where
from gpt_train.learn.steps import Step
from gpt_train.learn.zoo import MISTAKES, Mistake

SEED = 0
"""The verification inputs' seed: a check gives the same verdict every time it is run."""

MATCH = {"rtol": 1e-7, "atol": 1e-9}
"""How close a kernel's results must be to a mistake's to be called that mistake: far looser than a pass
(1e-12), since a learner writes the same mistake in another order, and far tighter than any two mistakes."""

FLASH_POSITIONS, FLASH_HEAD = 512, 16
LARGEST_TILE = 128
"""The tiled step runs attention over FLASH_POSITIONS and refuses any tensor bigger than a
(LARGEST_TILE, LARGEST_TILE) block or the inputs themselves; the (T, T) scores are 16 times that."""

DEFAULT_TILE = 64


@dataclass(frozen=True)
class Verdict:
    """Whether the step passes, and the line (or lines) that say so or say what is wrong."""

    passed: bool
    message: str


def check_file(step: Step, path: Path) -> Verdict:
    """Load the learner's file for `step` and grade the function it defines."""
    try:
        module = load_module(path)
        kernel = learner_function(module, path, step.function, step.parameters)
    except LearnerError as error:
        return Verdict(False, str(error))
    return grade(step, kernel, path, tile=getattr(module, "TILE", DEFAULT_TILE))


def grade(step: Step, kernel: Callable[..., Tensor], path: Path | None = None, tile: int = DEFAULT_TILE) -> Verdict:
    """Grade `kernel` as the answer to `step`; `path` is its file, named in what the verdict says."""
    kernel = output_checked(kernel)  # an output on another device, sparse or a subclass: the kernel's failure
    try:
        outcomes = [run_case(kernel, case, SEED) for case in cases_for(step.function, SEED)]
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        if is_stub(error):
            return Verdict(False, f"{where(error, path)}: {step.function} is not written yet (it raises "
                                  "NotImplementedError): write its body in place of the raise")  # fmt: skip
        return Verdict(False, f"{where(error, path)}: {step.function} raised {describe(error)}")
    kernel = guarded(kernel)  # from here a SystemExit is the kernel failing a check, as any exception is
    rows = verify_kernel(step.slot, kernel, seed=SEED)
    failure = first_failure(rows)
    if failure is not None:
        mistake = diagnose(step, outcomes, tile)
        lines = [f"{step.name}: {mistake.message}"] if mistake else []
        lines.append(f"{step.name}: {failure}" if mistake is None else f"  first difference: {failure}")
        return Verdict(False, "\n".join(lines))
    refusal = _requirement_unmet(step, kernel)
    if refusal is not None:
        return Verdict(False, f"{step.name}: {refusal}")
    return Verdict(True, f"{step.name}: passed, {len(rows)} checks forward and backward in float64, largest "
                         f"difference {largest_difference(rows):.1e}")  # fmt: skip


def largest_difference(rows: list[Row]) -> float:
    return max(max(row.forward, row.grad or 0.0) for row in rows)


# diagnosis -----------------------------------------------------------------------------------
def diagnose(step: Step, outcomes: list[Outcome], tile: int = DEFAULT_TILE) -> Mistake | None:
    """The first of the step's mistakes whose results the kernel's agree with on every case, if any."""
    cases = cases_for(step.function, SEED)
    for mistake in MISTAKES.get(step.name, ()):
        for variant in mistake.kernels:
            made = functools.partial(variant, tile=tile) if mistake.tiled else variant
            if all(_agree(got, run_case(made, case, SEED), mistake.backward)
                   for got, case in zip(outcomes, cases, strict=True)):  # fmt: skip
                return mistake
    return None


def _agree(got: Outcome, mistaken: Outcome, with_gradients: bool) -> bool:
    pairs = [(got.output, mistaken.output)]
    if with_gradients:
        if len(got.grads) != len(mistaken.grads):
            return False
        pairs += list(zip(got.grads, mistaken.grads, strict=True))
    return all(_close(a, b) for a, b in pairs)


def _close(a: Tensor | None, b: Tensor | None) -> bool:
    """Equal within MATCH where finite, and nan and inf (of the same sign) in the same places."""
    if a is None or b is None:
        return a is b
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    finite = a.isfinite()
    if not (torch.equal(finite, b.isfinite()) and torch.equal(a.isnan(), b.isnan())):
        return False
    infinite = a.isinf()
    return torch.equal(a[infinite], b[infinite]) and torch.allclose(a[finite], b[finite], **MATCH)


# what a step asks beyond the numbers ---------------------------------------------------------
def _requirement_unmet(step: Step, kernel: Callable[..., Tensor]) -> str | None:
    if step.handwritten_backward:
        return _autograd_derived(step, kernel)
    if step.tiled:
        return _forms_square(kernel)
    return None


def _autograd_derived(step: Step, kernel: Callable[..., Tensor]) -> str | None:
    """Why the kernel's gradient is autograd's rather than a backward of its own, or None: some input's
    gradient must not be reachable from the output without passing through a torch.autograd.Function."""
    case = cases_for(step.function, SEED)[0]
    output = kernel(*case.args)
    pending, seen = [output.grad_fn], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen or isinstance(node, torch.autograd.function.BackwardCFunction):
            continue
        seen.add(node)
        if type(node).__name__ == "AccumulateGrad":
            return ("autograd derived this backward: write the gradient yourself in a torch.autograd.Function "
                    "(forward and backward staticmethods) and return YourFunction.apply(...)")  # fmt: skip
        pending += [next_node for next_node, _ in node.next_functions]
    return None


def _forms_square(kernel: Callable[..., Tensor]) -> str | None:
    """Why the kernel is not tiled (it made a tensor the size of the (T, T) scores), or None."""
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
