"""The plainest correct kernels: each slot's function in a few tensor operations, differentiated by autograd.

They are what a learner writes in `gpt-train learn`, and what each exercise's check is pinned to.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gpt_core.functional import IGNORE_INDEX


def softmax(x: Tensor) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) over the last dim."""
    exp = (x - x.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True)


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """softmax(q k^T / sqrt(d)) v; causal: query i sits at position Tk - Tq + i and sees keys up to it."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return softmax(scores) @ v


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim, var the biased variance."""
    centred = x - x.mean(dim=-1, keepdim=True)
    y = centred / (centred.square().mean(dim=-1, keepdim=True) + eps).sqrt() * weight
    return y if bias is None else y + bias


def gelu(x: Tensor) -> Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean of logsumexp(logits) - logits[target] over the rows whose target is not IGNORE_INDEX."""
    scored = targets != IGNORE_INDEX
    logits, targets = logits[scored], targets[scored]
    row_max = logits.amax(dim=-1, keepdim=True)
    lse = (logits - row_max).exp().sum(dim=-1).log() + row_max.squeeze(-1)
    return (lse - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean()
