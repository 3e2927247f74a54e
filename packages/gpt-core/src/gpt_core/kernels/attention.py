"""Fused causal attention with a hand-derived backward: the fast `attention` kernel.

    S = q k^T / sqrt(d) (+ the causal mask),   P = softmax(S),   O = P v

With dO the gradient of the output, `_Attention`'s backward is
    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dP * P)),   dQ = dS K,   dK = dS^T Q
(times the 1/sqrt(d) scale), so the forward keeps only q, k, v and P. The tricks, each explained where it is used:
 - the softmax in base 2 (`_log2_scores`), the mask as an additive bias built once per shape (`_causal_bias`);
 - contiguous copies of k and v made once for the backward; with one query, outer products (`_transposed_times`);
 - the softmax's statistics in float32 for 16-bit inputs; without a gradient to record, no Function at all.
`attention_weights` computes P by the same arithmetic with plain differentiable operations (the `pattern` hook's).
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.reference import upcast

_LOG2_E = math.log2(math.e)


def causal_mask(n_queries: int, n_keys: int, device: torch.device) -> Tensor:
    """Boolean (n_queries, n_keys) mask, True where allowed. The queries are the last positions of the keys (the
    KV-cache case): query i sits at n_keys - n_queries + i and sees keys 0 .. n_keys - n_queries + i."""
    offset = n_keys - n_queries
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril_(offset)


def _causal_bias(n_queries: int, n_keys: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """`causal_mask` as an additive bias, 0 or -inf, built once per shape in eager mode: adding it is one cheap
    pass, where masked_fill with a broadcast boolean mask is a slow one on CPU."""
    if torch.compiler.is_compiling():  # in the graph, where the compiler folds it into the kernel
        return _new_causal_bias(n_queries, n_keys, device, dtype)
    return _cached_causal_bias(n_queries, n_keys, device, dtype)


def _new_causal_bias(n_queries: int, n_keys: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    blocked = ~causal_mask(n_queries, n_keys, device)
    return torch.zeros(n_queries, n_keys, device=device, dtype=dtype).masked_fill_(blocked, float("-inf"))


_cached_causal_bias = functools.lru_cache(maxsize=64)(_new_causal_bias)


def _log2_scores(q: Tensor, k: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """The masked scores q k^T scale log2(e) (B, H, Tq, Tk), float32 at least, and q times scale log2(e). Base 2,
    softmax(s) = 2^(s log2(e) - max) / sum: exp is slow on -inf on CPU, exp2 is not, and log2(e) rides on the scale."""
    q = q * (scale * _LOG2_E)
    scores = upcast(q @ k.transpose(-2, -1))  # (B, H, Tq, Tk)
    n_queries, n_keys = scores.shape[-2:]
    if causal and n_queries > 1:
        scores.add_(_causal_bias(n_queries, n_keys, scores.device, scores.dtype))
    return scores, q


def _attention_forward(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, dropout_p: float
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """The output and probabilities, with the dropout mask and the scaled q that the backward needs."""
    scores, q = _log2_scores(q, k, causal, scale)
    probs = scores.sub_(scores.amax(dim=-1, keepdim=True)).exp2_()
    probs = probs.div_(probs.sum(dim=-1, keepdim=True)).to(v.dtype)
    if dropout_p > 0.0:
        keep = (torch.rand_like(probs) >= dropout_p).to(probs.dtype)
        if dropout_p < 1.0:  # at p = 1 every weight is dropped: keep stays 0 rather than 0/0 = nan
            keep /= 1.0 - dropout_p
        out = (probs * keep) @ v
    else:
        keep = None
        out = probs @ v  # (B, H, Tq, d)
    return out, probs, keep, q


def _transposed_times(a: Tensor, b: Tensor) -> Tensor:
    """a^T b over the query axis: (B, H, Tq, Tk), (B, H, Tq, d) -> (B, H, Tk, d); with one query, the outer
    product by broadcasting (the same numbers), where batched GEMM on (Tk, 1) x (1, d) shapes is slow."""
    if a.shape[-2] == 1:
        return a.transpose(-2, -1) * b
    return a.transpose(-2, -1) @ b


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, dropout_p: float):
        out, probs, keep, q_log2 = _attention_forward(q, k, v, causal, scale, dropout_p)  # the no-grad path's bits
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            # Contiguous copies once here, where every matmul of the backward would copy the strided heads.
            k, v = k.contiguous(), v.contiguous()
        ctx.scale = scale
        ctx.save_for_backward(q_log2, k, v, probs, keep, out)
        return out

    @staticmethod
    @differentiates_once
    def backward(ctx, d_out: Tensor):
        q_log2, k, v, probs, keep, out = ctx.saved_tensors  # q_log2 = q * scale * log2(e)
        d_out = d_out.contiguous()
        dropped = probs if keep is None else probs * keep
        d_v = _transposed_times(dropped, d_out)
        d_probs = d_out @ v.transpose(-2, -1)
        if keep is not None:
            d_probs = d_probs * keep
        # rowsum(dP * P) = rowsum(dO * O), from a (Tq, d) product instead of a (Tq, Tk) one; float32, since a
        # rounding error of it is shared by the whole row and adds up over every key in dQ = dS K.
        rows = torch.linalg.vecdot(upcast(d_out), upcast(out)).unsqueeze(-1)  # (B, H, Tq, 1)
        d_scores = upcast(d_probs).sub_(rows).mul_(probs).to(d_probs.dtype)  # dL/dS, S = scale q k^T
        d_q = (d_scores @ k).mul_(ctx.scale)
        d_k = _transposed_times(d_scores, q_log2).div_(_LOG2_E)
        return d_q, d_k, d_v, None, None, None


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d)) v, fused, with a hand-derived backward and `dropout_p` on the weights; q (B, H, Tq, d),
    k and v (B, H, Tk, d), Tq <= Tk when causal, the queries aligned to the end (`causal_mask`)."""
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(f"causal attention needs no more queries than keys, got {q.shape[-2]} > {k.shape[-2]}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p}")
    scale = 1.0 / math.sqrt(q.shape[-1])
    if not torch.is_grad_enabled():  # no graph to record: skip the Function's bookkeeping
        return _attention_forward(q, k, v, causal, scale, dropout_p)[0]
    return _Attention.apply(q, k, v, causal, scale, dropout_p)


def attention_weights(q: Tensor, k: Tensor, causal: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(d)) (B, H, Tq, Tk) by `attention`'s arithmetic, differentiated by autograd."""
    scores, _ = _log2_scores(q, k, causal, 1.0 / math.sqrt(q.shape[-1]))
    probs = (scores - scores.detach().amax(dim=-1, keepdim=True)).exp2()  # the shift changes no gradient
    return (probs / probs.sum(dim=-1, keepdim=True)).to(q.dtype)
