"""Choosing the device: auto picks cuda, then mps, then cpu; an absent device is an error, never a fallback."""

from __future__ import annotations

import re

import torch

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


def resolve_device(name: str) -> torch.device:
    """`auto`, `cpu`, `cuda`, `cuda:N` or `mps` -> a torch.device that exists on this machine. `cuda:N` is made the
    current device: Triton kernels and CUDA graphs launch on the current one, whatever their tensors' device."""
    name = name.strip().lower()
    if name == "auto":
        name = next((found for found in ("cuda", "mps") if found in available_devices()), "cpu")
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
