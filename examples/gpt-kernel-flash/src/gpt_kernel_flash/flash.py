"""FlashAttention on plain tensors: attention computed tile by tile with an online softmax.

The plain kernel forms the (Tq, Tk) score matrix, its softmax and, for the backward, keeps the
probabilities: memory quadratic in the sequence length. Here queries and keys are cut into tiles; for
each query tile a running maximum m, a running sum l and an unnormalised output are carried across the
key tiles (the online softmax, README.md derives it), so no more than one (tile, tile) block of scores
exists at a time. The forward keeps only q, k, v, the output and each row's log-sum-exp L = m + log l;
the backward recomputes each tile's probabilities as exp(s - L) (FlashAttention-2's backward, Dao 2023).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gpt_core.kernels.once import differentiates_once

TILE = 64
"""Queries and keys per tile: big enough that each tile is a real matrix product, small against T."""


def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, tile: int = TILE) -> Tensor:
    """Attention tile by tile with an online softmax (FlashAttention); no T x T matrix is ever formed.

    q: (B, H, Tq, d); k, v: (B, H, Tk, d); scale 1/sqrt(d). With `causal`, query i is position
    Tk - Tq + i and sees the keys up to it (the KV-cache layout gpt-core's attention slot asks for).
    """
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(f"causal attention needs no more queries than keys, got {q.shape[-2]} > {k.shape[-2]}")
    if not torch.is_grad_enabled():  # nothing to record: skip the Function's bookkeeping
        return _forward(q, k, v, causal, tile)[0]
    return _FlashAttention.apply(q, k, v, causal, tile)


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool, tile: int) -> Tensor:
        out, lse = _forward(q, k, v, causal, tile)
        ctx.save_for_backward(q, k, v, out, lse)  # O(T d) and O(T): never the (Tq, Tk) probabilities
        ctx.causal, ctx.tile = causal, tile
        return out

    @staticmethod
    @differentiates_once
    def backward(ctx, d_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        return (*_backward(q, k, v, out, lse, d_out, ctx.causal, ctx.tile), None, None)


def _key_tiles(first_query: int, n_queries: int, n_keys: int, offset: int, causal: bool, tile: int) -> range:
    """Starts of the key tiles a query tile must visit: all of them, or causally only those holding a key
    at or before the tile's last query position (offset + first_query + n_queries - 1)."""
    end = min(n_keys, offset + first_query + n_queries) if causal else n_keys
    return range(0, end, tile)


def _scores(q_tile: Tensor, k_tile: Tensor, first_query: int, first_key: int, offset: int, causal: bool) -> Tensor:
    """Scaled scores of one tile pair, (B, H, tq, tk), with -inf where a key lies after its query.

    Only tiles that cross the diagonal need the mask; the others are left untouched.
    """
    scores = q_tile @ k_tile.transpose(-2, -1)  # (B, H, tq, tk)
    n_queries, n_keys = scores.shape[-2:]
    if causal and first_key + n_keys - 1 > offset + first_query:
        query_position = offset + first_query + torch.arange(n_queries, device=scores.device)
        key_position = first_key + torch.arange(n_keys, device=scores.device)
        scores = scores.masked_fill(key_position[None, :] > query_position[:, None], float("-inf"))
    return scores


def _forward(q: Tensor, k: Tensor, v: Tensor, causal: bool, tile: int) -> tuple[Tensor, Tensor]:
    """The output (B, H, Tq, d) and each row's log-sum-exp of scores (B, H, Tq, 1)."""
    n_queries, n_keys, d = q.shape[-2], k.shape[-2], q.shape[-1]
    offset = n_keys - n_queries
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = q.new_empty(*q.shape[:-1], 1)
    for i in range(0, n_queries, tile):
        q_tile = q[..., i : i + tile, :] * scale  # (B, H, tq, d)
        running_max = q_tile.new_full((*q_tile.shape[:-1], 1), float("-inf"))  # m
        running_sum = q_tile.new_zeros((*q_tile.shape[:-1], 1))  # l
        acc = torch.zeros_like(q_tile)  # sum_j exp(s_j - m) v_j
        # Key tiles run left to right, and the first holds key 0, which every query sees: m is finite after it.
        for j in _key_tiles(i, q_tile.shape[-2], n_keys, offset, causal, tile):
            scores = _scores(q_tile, k[..., j : j + tile, :], i, j, offset, causal)  # (B, H, tq, tk)
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            probs = (scores - new_max).exp_()  # unnormalised, relative to the new maximum
            rescale = (running_max - new_max).exp_()  # what the old terms were measured against
            running_sum = running_sum * rescale + probs.sum(dim=-1, keepdim=True)
            acc = acc * rescale + probs @ v[..., j : j + tile, :]
            running_max = new_max
        out[..., i : i + tile, :] = acc / running_sum
        lse[..., i : i + tile, :] = running_max + running_sum.log()
    return out, lse


def _backward(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, d_out: Tensor, causal: bool, tile: int
) -> tuple[Tensor, Tensor, Tensor]:
    """dq, dk, dv, recomputing each tile's probabilities P = exp(s - L) from the saved log-sum-exp.

    With dP = dO V^T, the softmax's backward is dS = P * (dP - D), where D = rowsum(dP * P) equals
    rowsum(dO * O): one (Tq, 1) vector from tensors already saved, so no tile needs a second pass.
    """
    n_queries, n_keys, d = q.shape[-2], k.shape[-2], q.shape[-1]
    offset = n_keys - n_queries
    scale = 1.0 / math.sqrt(d)
    rows = (d_out * out).sum(dim=-1, keepdim=True)  # D: (B, H, Tq, 1)
    d_q, d_k, d_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for i in range(0, n_queries, tile):
        q_tile = q[..., i : i + tile, :] * scale  # (B, H, tq, d)
        d_out_tile = d_out[..., i : i + tile, :]
        for j in _key_tiles(i, q_tile.shape[-2], n_keys, offset, causal, tile):
            k_tile, v_tile = k[..., j : j + tile, :], v[..., j : j + tile, :]
            probs = (_scores(q_tile, k_tile, i, j, offset, causal) - lse[..., i : i + tile, :]).exp_()  # P
            d_v[..., j : j + tile, :] += probs.transpose(-2, -1) @ d_out_tile
            d_scores = probs * (d_out_tile @ v_tile.transpose(-2, -1) - rows[..., i : i + tile, :])  # dS
            d_q[..., i : i + tile, :] += (d_scores @ k_tile) * scale
            d_k[..., j : j + tile, :] += d_scores.transpose(-2, -1) @ q_tile  # q_tile carries the scale
    return d_q, d_k, d_v
