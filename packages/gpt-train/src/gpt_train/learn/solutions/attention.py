"""The attention step's answer: scores, the end-aligned causal mask, softmax, weighted values; autograd derives the
backward."""

import math

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d) -> (B, H, Tq, d); query i sits at position Tk - Tq + i."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True) @ v
