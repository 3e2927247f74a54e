"""torch.compile for a run: its preconditions, its failures in one line, and the check of the first compiled step
against an eager one, since a compiler can compute a model wrong silently (it has: a LayerNorm backward on CUDA)."""

from __future__ import annotations

import importlib.util
import math
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch

from gpt_train.errors import TrainError

T = TypeVar("T")

COMPILED_STEP_TOLERANCE = {"fp32": 1e-2, "bf16": 5e-2, "fp16": 5e-2}
"""The relative difference (2-norms) always accepted between two first steps' loss and gradients, by dtype: rounding
differs by far less, a wrong gradient by the order of the gradient itself."""
ROUNDING_MARGIN = 10.0
"""Where the eager step's own rounding exceeds the tolerance, this many times its distance from the float64 step."""


@dataclass(frozen=True)
class Step:
    loss: float
    grads: Mapping[str, torch.Tensor]


class CompileError(TrainError):
    """torch.compile is unusable here (no toolchain), failed on the model, or computes it wrong."""


def compile_off(resumed: bool) -> str:
    """How to train without the compiler: a resumed run compiles as it started unless told --no-compile."""
    return "resume it with --no-compile" if resumed else "drop --compile"


def check_compiler(device: torch.device, resumed: bool = False) -> None:
    """torch.compile's backends need a toolchain: a C++ compiler on CPU, Triton on CUDA."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        raise CompileError(
            f"--compile on CPU needs a C++ compiler (g++ or clang++); install one or {compile_off(resumed)}"
        )
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        raise CompileError(f"--compile on CUDA needs Triton (pip install triton); install it or {compile_off(resumed)}")


def compiler_failures_explained(work: Callable[[], T]) -> T:
    """Run `work`, a first step under --compile; a compiler failure becomes a CompileError."""
    try:
        return work()
    except CompileError:
        raise
    except Exception as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        first = lines[0] if lines else type(error).__name__
        first = first if len(first) <= LONGEST else first[: LONGEST - 3] + "..."  # a wrapped error's whole repr
        raise CompileError(f"torch.compile failed: {first}") from None


LONGEST = 300  # characters of a compiler error shown


def relative_difference(compiled: torch.Tensor, eager: torch.Tensor) -> float:
    """||compiled - eager|| / ||eager|| over the finite entries (inf where those differ, or only eager is 0)."""
    compiled, eager = compiled.cpu().double(), eager.cpu().double()  # MPS has no float64
    finite = eager.isfinite()
    if not torch.equal(finite, compiled.isfinite()):
        return float("inf")
    compiled, eager = compiled[finite], eager[finite]
    difference = float(torch.linalg.vector_norm(compiled - eager))
    scale = float(torch.linalg.vector_norm(eager))
    if scale == 0.0:
        return 0.0 if difference == 0.0 else float("inf")
    return difference / scale


def check_compiled_step(
    eager: Step,
    compiled: Step,
    tolerance: float,
    exact: Step | None = None,
    kernels: str = "fast",
    resumed: bool = False,
) -> str | None:
    found = step_disagreement(eager, compiled, tolerance, exact)
    if found is None:
        return None
    other = "fast" if kernels == "reference" else "reference"
    instead = compile_off(resumed) + ("" if resumed else f", or try --kernels {other}")
    return (
        f"--compile: the compiled first step disagrees with the eager one on the same batch and weights: {found}; "
        f"the compiler computes this model wrong here, so the run stopped before training ({instead})"
    )


def step_disagreement(eager: Step, compiled: Step, tolerance: float, exact: Step | None = None) -> str | None:
    """None if `compiled`'s loss and gradients agree with `eager`'s within `tolerance` (or ROUNDING_MARGIN times
    eager's distance from `exact`, its float64 step), else what differs most, in words."""
    bound = lambda difference_from_exact: max(tolerance, ROUNDING_MARGIN * difference_from_exact)
    loss_bound = bound(0.0 if exact is None else relative_loss_difference(eager.loss, exact.loss))
    checks = {"the loss": (relative_loss_difference(compiled.loss, eager.loss), loss_bound)}
    for name, grad in eager.grads.items():
        rounding = 0.0 if exact is None else relative_difference(grad, exact.grads[name])
        checks[f"the gradient of {name}"] = (relative_difference(compiled.grads[name], grad), bound(rounding))
    worst = max(checks, key=lambda what: checks[what][0] / checks[what][1])
    difference, limit = checks[worst]
    if difference <= limit:
        return None
    if worst != "the loss":
        name = worst.removeprefix("the gradient of ")
        ours, theirs = compiled.grads[name].isfinite(), eager.grads[name].isfinite()
        if not torch.equal(ours, theirs):
            counts = int((~ours).sum()), int((~theirs).sum())
            alike = ", and not at the same ones" if counts[0] == counts[1] else ""
            where = f"{counts[0]:,} of its {ours.numel():,} entries, the eager one at {counts[1]:,}{alike}"
            return f"{worst} is not finite at {where}"
    loss_values = f" ({compiled.loss:.6g} against {eager.loss:.6g})" if worst == "the loss" else ""
    return f"{worst} differs by {difference:.2g} relative{loss_values}, beyond the {limit:.2g} accepted"


def relative_loss_difference(loss: float, reference: float) -> float:
    difference = abs(loss - reference)
    return difference / max(abs(reference), 1e-12) if math.isfinite(difference) else float("inf")
