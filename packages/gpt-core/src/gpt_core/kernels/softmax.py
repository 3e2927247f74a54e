"""Softmax and log-softmax over the last dimension, shifted by the row max, statistics in float32.

    softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m),   log_softmax(x) = (x - m) - log sum_j exp(x_j - m)

with m = max_j x_j: the shift changes neither result and keeps exp from overflowing on large logits.
Both are short enough that autograd's own backward is already what a person would write. 16-bit inputs
are shifted, exponentiated and summed in float32 (`precision`) and the result handed back in their dtype.
"""

from __future__ import annotations

from torch import Tensor

from gpt_core.kernels.precision import upcast


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)), shifted by the max first so large logits cannot overflow; computed in
    float32 for 16-bit input and returned in the input's dtype."""
    wide = upcast(x)
    exp = (wide - wide.amax(dim=dim, keepdim=True)).exp()
    return (exp / exp.sum(dim=dim, keepdim=True)).to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x), computed as (x - max) - log(sum(exp(x - max))); in float32 for 16-bit input,
    returned in the input's dtype."""
    wide = upcast(x)
    shifted = wide - wide.amax(dim=dim, keepdim=True)
    return (shifted - shifted.exp().sum(dim=dim, keepdim=True).log()).to(x.dtype)
