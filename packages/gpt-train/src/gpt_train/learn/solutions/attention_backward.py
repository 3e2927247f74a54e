"""The attention_backward step's answer: attention as a torch.autograd.Function with the gradient derived by hand,
dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K s, dK = dS^T Q s (s = 1/sqrt(d))."""

import math

import torch


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = q @ k.transpose(-2, -1) * scale  # (B, H, Tq, Tk)
        if causal:
            n_queries, n_keys = scores.shape[-2:]
            allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
            scores = scores.masked_fill(~allowed, float("-inf"))
        exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        probs = exp / exp.sum(dim=-1, keepdim=True)  # P
        ctx.save_for_backward(q, k, v, probs)
        ctx.scale = scale
        return probs @ v

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, probs = ctx.saved_tensors
        d_v = probs.transpose(-2, -1) @ d_out  # (B, H, Tk, d)
        d_probs = d_out @ v.transpose(-2, -1)  # (B, H, Tq, Tk)
        d_scores = probs * (d_probs - (d_probs * probs).sum(dim=-1, keepdim=True))
        d_q = d_scores @ k * ctx.scale
        d_k = d_scores.transpose(-2, -1) @ q * ctx.scale
        return d_q, d_k, d_v, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d) -> (B, H, Tq, d), with the hand-derived backward."""
    return Attention.apply(q, k, v, causal)
