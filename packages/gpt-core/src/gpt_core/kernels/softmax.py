"""Softmax and log-softmax over the last dimension, shifted by the row max, statistics in float32.

    softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m),   log_softmax(x) = (x - m) - log sum_j exp(x_j - m)

with m = max_j x_j: the shift changes neither result and keeps exp from overflowing. Autograd's own backward is
already what a person would write.
"""

from __future__ import annotations

from torch import Tensor

from gpt_core.reference import upcast


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Softmax over `dim`, shifted by the row max, statistics in float32 for 16-bit inputs."""
    wide = upcast(x)
    exp = (wide - wide.amax(dim=dim, keepdim=True)).exp()
    return (exp / exp.sum(dim=dim, keepdim=True)).to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    wide = upcast(x)
    shifted = wide - wide.amax(dim=dim, keepdim=True)
    return (shifted - shifted.exp().sum(dim=dim, keepdim=True).log()).to(x.dtype)
