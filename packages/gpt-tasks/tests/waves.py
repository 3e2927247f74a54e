"""Embeddings of the numbers 0..p-1 built from known Fourier frequencies, for the modadd tests."""

from __future__ import annotations

import math

import torch


def waves(p: int, frequencies: dict[int, float], dim: int = 12, offset: float = 0.0) -> torch.Tensor:
    """An embedding (p, dim) of the numbers built from known waves: at each frequency k, amplitude
    frequencies[k] and a random phase per dimension, plus a constant `offset` (frequency 0)."""
    a = torch.arange(p, dtype=torch.float64)[:, None]
    phases = torch.rand(len(frequencies), dim, dtype=torch.float64, generator=torch.Generator().manual_seed(p)) * 6.3
    rows = [
        amp * torch.cos(2 * math.pi * k * a / p + phase)
        for (k, amp), phase in zip(frequencies.items(), phases, strict=True)
    ]
    return sum(rows) + offset
