"""Step 7: attention with a backward you derive yourself.

With P = softmax(S) the weights, S = q k^T s the scaled scores (s = 1/sqrt(d)) and dO the gradient of
the output O = P v:

    dV = P^T dO                  dP = dO V^T
    dS = P * (dP - rowsum(dP * P))          the softmax's backward, row by row
    dQ = dS K s                  dK = dS^T Q s

(masked entries have P = 0, so they get no gradient by themselves).

Your backward computes from P, saved without a graph, so it differentiates once: a second derivative through
it (create_graph=True) misses every term through P. gpt-core's own kernel raises there instead
(gpt_core/kernels/once.py).

Check it with `gpt-train learn check attention_backward`: the check refuses a gradient autograd derived,
including autograd called inside your backward (torch.autograd.grad, .backward(), torch.func). Mind the
shapes: dV and dK have one row per key, (Tk, d), so each is a transpose times a (Tq, ...) matrix.
"""

import torch


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        """The forward of step 2, with P = softmax(scores) the weights; ctx.save_for_backward(q, k, v, P) and
        ctx.scale = 1 / sqrt(d) keep what backward needs."""
        # BEGIN SOLUTION
        scale = q.shape[-1] ** -0.5
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
        # END SOLUTION

    @staticmethod
    def backward(ctx, d_out):
        """d_out: (B, H, Tq, d) -> (dq, dk, dv, None)."""
        # BEGIN SOLUTION
        q, k, v, probs = ctx.saved_tensors
        d_v = probs.transpose(-2, -1) @ d_out  # (B, H, Tk, d)
        d_probs = d_out @ v.transpose(-2, -1)  # (B, H, Tq, Tk)
        d_scores = probs * (d_probs - (d_probs * probs).sum(dim=-1, keepdim=True))
        d_q = d_scores @ k * ctx.scale
        d_k = d_scores.transpose(-2, -1) @ q * ctx.scale
        return d_q, d_k, d_v, None
        # END SOLUTION


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d) -> (B, H, Tq, d), with your backward."""
    return Attention.apply(q, k, v, causal)
