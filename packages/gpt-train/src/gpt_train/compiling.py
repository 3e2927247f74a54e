"""torch.compile's preconditions, checked before a run writes anything."""

from __future__ import annotations

import importlib.util
import shutil

import torch

from gpt_train.errors import TrainError


class CompileError(TrainError):
    """torch.compile is unusable here (no toolchain) or failed on the model."""


def check_compiler(device: torch.device) -> None:
    """torch.compile's backends need a toolchain: a C++ compiler on CPU, Triton on CUDA."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        raise CompileError("--compile on CPU needs a C++ compiler (g++ or clang++); install one or drop --compile")
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        raise CompileError("--compile on CUDA needs Triton (pip install triton); install it or drop --compile")
