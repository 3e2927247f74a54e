"""torch.compile's preconditions, checked before a run writes anything, and its failures in one line."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from typing import TypeVar

import torch

from gpt_train.errors import TrainError

T = TypeVar("T")


class CompileError(TrainError):
    """torch.compile is unusable here (no toolchain) or failed on the model."""


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
    except Exception as error:
        text = str(error).strip()
        raise CompileError(f"torch.compile failed: {text.splitlines()[0] if text else type(error).__name__}") from None
