"""The gelu step's answer: GPT-2's tanh approximation, with torch.tanh (stable for any input)."""

import math

import torch


def gelu(x: torch.Tensor) -> torch.Tensor:
    """x: any shape -> the same shape."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
