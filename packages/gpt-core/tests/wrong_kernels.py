"""Kernels wrong in a way a test must catch, shared by the tests that catch it."""

from __future__ import annotations

import torch


def online_softmax(x: torch.Tensor, chunk: int = 4) -> torch.Tensor:
    """Softmax over chunks of the vocabulary, its running max starting at -inf (as a tiled GPU kernel computes it):
    right on finite logits, nan on a row whose first chunk is all -inf (top-k's mask)."""
    m = torch.full((*x.shape[:-1], 1), float("-inf"), dtype=x.dtype)
    s = torch.zeros_like(m)
    for i in range(0, x.shape[-1], chunk):
        c = x[..., i : i + chunk]
        new = torch.maximum(m, c.amax(-1, keepdim=True))
        s = s * torch.exp(m - new) + torch.exp(c - new).sum(-1, keepdim=True)
        m = new
    return torch.exp(x - m) / s
