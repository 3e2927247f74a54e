"""torch.compile for a run: its preconditions, checked before a run writes anything; the compiled model; the
check of the first compiled step against an eager one; and the compiler's failures in one line.

A compiler can be wrong in a way nobody sees: Inductor on CUDA compiled a hand-written LayerNorm backward
into gradients off by ~64, and the run trained, exited 0 and reached 0.0001 held-out exact match where the
eager run reached 0.9999. So a compiled run's first step is also taken eagerly, on the same batch and
weights, and the two must agree (`check_compiled_step`) before training goes on.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Mapping
from typing import TypeVar

import torch

from gpt_train.errors import TrainError

T = TypeVar("T")

COMPILED_STEP_TOLERANCE = {"fp32": 1e-2, "bf16": 5e-2, "fp16": 5e-2}
"""The largest relative difference accepted between the compiled and the eager first step, by the run's
dtype: for the loss |compiled - eager| / |eager|, for each parameter's gradient ||compiled - eager|| /
||eager|| (2-norms). Compiled and eager round differently (fused kernels, another summation order; TF32
products on CUDA round to 10 bits, 5e-4 relative, bf16 and fp16 to 8 and 11), which leaves float32 runs
around 1e-6 apart on a CPU; the bound is far above that and far below a wrong gradient, which differs by
the order of the gradient itself (1e-1 to 1e+2 relative in the compiled LayerNorm above)."""


class CompileError(TrainError):
    """torch.compile is unusable here (no toolchain), failed on the model, or computes it wrong."""


def check_compiler(device: torch.device) -> None:
    """torch.compile's backends need a toolchain: a C++ compiler on CPU, Triton on CUDA."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        raise CompileError("--compile on CPU needs a C++ compiler (g++ or clang++); install one or drop --compile")
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        raise CompileError("--compile on CUDA needs Triton (pip install triton); install it or drop --compile")


def compiler_failures_explained(work: Callable[[], T]) -> T:
    """Run `work`, a first step under --compile (where compilation happens, forward and backward); a
    compiler failure becomes a CompileError instead of a traceback."""
    try:
        return work()
    except CompileError:
        raise
    except Exception as error:
        text = str(error).strip()
        raise CompileError(f"torch.compile failed: {text.splitlines()[0] if text else type(error).__name__}") from None


def relative_difference(compiled: torch.Tensor, eager: torch.Tensor) -> float:
    """||compiled - eager|| / ||eager|| in float64 over the finite entries (0 when both are 0, inf when only
    eager is, or when the two are not finite in the same places: fp16's first scaled gradients may overflow)."""
    compiled, eager = compiled.double(), eager.double()
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
    eager_loss: float,
    eager_grads: Mapping[str, torch.Tensor],
    compiled_loss: float,
    compiled_grads: Mapping[str, torch.Tensor],
    tolerance: float,
) -> str | None:
    """None if the compiled step's loss and every gradient agree with the eager step's within `tolerance`
    (relative, `COMPILED_STEP_TOLERANCE`), else one line naming the loss or the parameter that differs most."""
    loss_difference = abs(compiled_loss - eager_loss) / max(abs(eager_loss), 1e-12)
    differences = {name: relative_difference(compiled_grads[name], grad) for name, grad in eager_grads.items()}
    worst = max(differences, key=differences.__getitem__, default=None)
    if loss_difference <= tolerance and (worst is None or differences[worst] <= tolerance):
        return None
    if worst is None or loss_difference > differences[worst]:
        what = f"the loss differs by {loss_difference:.2g} relative ({compiled_loss:.6g} against {eager_loss:.6g})"
    else:
        what = f"the gradient of {worst} differs by {differences[worst]:.2g} relative"
    return (
        f"--compile: the compiled first step disagrees with the eager one on the same batch and weights: {what}, "
        f"beyond the tolerance {tolerance:g}; the compiler computes this model wrong here, so the run stopped "
        "before training (drop --compile, or try --kernels reference)"
    )
