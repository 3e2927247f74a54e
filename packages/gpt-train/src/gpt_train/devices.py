"""Choosing the device: auto picks cuda, then mps, then cpu; an absent device is an error, never a fallback. A model
too large for the device's memory is refused before anything is written."""

from __future__ import annotations

import os
import re

import torch

from gpt_core import GPTConfig
from gpt_train.errors import TrainError


class DeviceError(TrainError):
    """A device name that is malformed or not present on this machine."""


def available_devices() -> list[str]:
    names = ["cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return names


def resolve_device(name: str, distributed: bool = False) -> torch.device:
    """`auto`, `cpu`, `cuda`, `cuda:N` or `mps` -> a torch.device that exists on this machine (`auto` under torchrun:
    never mps, which gloo and nccl cannot carry). `cuda:N` is made the current device: Triton kernels and CUDA graphs
    launch on the current one, whatever their tensors' device."""
    name = name.strip().lower()
    name = "mps" if name == "mps:0" else name  # as torch prints an MPS tensor's device
    if name == "auto":
        wanted = ("cuda",) if distributed else ("cuda", "mps")
        name = next((found for found in wanted if found in available_devices()), "cpu")
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", name):
        raise DeviceError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps")
    if name not in available_devices():
        raise DeviceError(
            f"device {name!r} is not available on this machine; available: {', '.join(available_devices())}"
        )
    device = torch.device(name)
    if device.index is not None:
        torch.cuda.set_device(device)
    return device


BYTES_PER_PARAMETER = 16  # float32 weight, gradient and AdamW's two moments


def check_memory(model: GPTConfig, device: torch.device) -> None:
    """Refuse a model whose weights, gradients and AdamW moments alone exceed the device's memory: a typo in n_embd
    or n_layer would otherwise fill memory until the system kills the process (or another)."""
    parameters = approximate_parameters(model)
    available = device_memory(device)
    if available is not None and BYTES_PER_PARAMETER * parameters > available:
        where = "this machine" if device.type == "cpu" else str(device)
        raise DeviceError(
            f"the model has about {parameters:.3g} parameters: {BYTES_PER_PARAMETER * parameters / 2**30:.3g} GiB for "
            f"its weights, gradients and AdamW state alone, more than the {available / 2**30:.3g} GiB of {where}; "
            "choose a smaller n_layer or n_embd"
        )


def approximate_parameters(model: GPTConfig) -> int:
    """The weights a model of this shape holds, from the shape alone: its matrices and embedding tables (the norms
    and biases, a few per layer, left out)."""
    d = model.n_embd
    per_layer = (4 + 8 * model.mlp) * d * d  # q, k, v, the output projection and the 4x MLP
    tables = model.vocab_size * d * (2 - model.tie_weights) + (model.position_limit or 0) * d
    return model.n_layer * per_layer + tables


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory on `device` (the machine's for the CPU), or None where it cannot be read."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device).total_memory
        if device.type == "mps":
            return torch.mps.recommended_max_memory()
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError, RuntimeError):  # no sysconf (Windows), an older torch
        return None
