"""The reference kernels (`REFERENCE_KERNELS`): each piece of the model as its definition in plain autograd, a few
lines under its formula, what a learner writes first; the fast set is pinned to these. A 16-bit input is computed
in float32 and handed back in its own dtype, as PyTorch's own kernels do: 8 significant bits would be the whole
signal of a large mean, and float16's GELU gradient (3x^2) overflows to nan from |x| = 148."""

from __future__ import annotations

import math

import torch
from torch import Tensor

IGNORE_INDEX = -100
"""Target value for positions a task does not score (the same default as PyTorch's)."""


def upcast(x: Tensor) -> Tensor:
    """`x` in float32 if it is a 16-bit float, else `x` itself, uncopied (both sets' mixed precision)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None = None) -> Tensor:
    """Zero each element with probability p and rescale the rest by 1/(1-p) (inverted dropout), in training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:  # everything dropped; x * keep / (1 - p) would be 0/0 = nan
        return x * 0.0
    keep = torch.empty_like(x, dtype=torch.float32).uniform_(generator=generator) >= p  # x's shape, even if unbacked
    return x * keep / (1.0 - p)


# softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j (the shift keeps exp from overflowing)
def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension, stable: the row max is subtracted first."""
    wide = upcast(x)
    exp = (wide - wide.amax(dim=-1, keepdim=True)).exp()
    return (exp / exp.sum(dim=-1, keepdim=True)).to(x.dtype)


# attention_weights(q, k) = softmax(q k^T / sqrt(d) + mask), the mask -inf where key j is after query i
def attention_weights(q: Tensor, k: Tensor, causal: bool = True) -> Tensor:
    """q (B, H, Tq, d), k (B, H, Tk, d) -> (B, H, Tq, Tk), each row summing to 1. Causal: the queries are the last
    Tq <= Tk positions (a cached decoding step), query i at Tk - Tq + i seeing keys up to it (Tq > Tk: rows of nan)."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if causal:
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return softmax(scores)


# attention(q, k, v) = attention_weights(q, k) v
def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, dropout_p: float = 0.0) -> Tensor:
    """q (B, H, Tq, d), k and v (B, H, Tk, d) -> (B, H, Tq, d), the weights dropped with probability `dropout_p`."""
    return dropout(attention_weights(q, k, causal), dropout_p, training=True) @ v


# layer_norm(x) = (x - mean) / sqrt(var + eps) * weight + bias, var the biased variance of the row
def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last dimension."""
    wide = upcast(x)
    mean = wide.mean(dim=-1, keepdim=True)
    var = ((wide - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (wide - mean) / torch.sqrt(var + eps) * weight
    return (y if bias is None else y + bias).to(x.dtype)


# gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
def gelu(x: Tensor) -> Tensor:
    """GELU, the tanh approximation GPT-2 uses."""
    wide = upcast(x)
    return (0.5 * wide * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (wide + 0.044715 * wide**3)))).to(x.dtype)


# cross_entropy = mean over scored rows n of logsumexp(logits_n) - logits_n[target_n]
def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """logits (N, V), targets (N,) -> the mean loss over the targets not equal to IGNORE_INDEX
    (nan, 0/0, when none is scored, as in PyTorch); float32 for 16-bit logits."""
    scored = targets != IGNORE_INDEX
    logits, targets = upcast(logits[scored]), targets[scored]  # (n, V), (n,)
    m = logits.amax(dim=-1, keepdim=True)
    logsumexp = m + (logits - m).exp().sum(dim=-1, keepdim=True).log()  # (n, 1)
    return (logsumexp - logits.gather(-1, targets[:, None])).mean()
