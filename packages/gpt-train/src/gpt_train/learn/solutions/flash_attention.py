"""The flash_attention step's answer: attention tile by tile with an online softmax, as a learner writes it
(autograd derives the backward, one tile-sized operation at a time)."""

import math

import torch

TILE = 64


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d) -> (B, H, Tq, d); query i sits at position Tk - Tq + i."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    offset = n_keys - n_queries
    out = []
    for i in range(0, n_queries, TILE):
        q_tile = q[..., i : i + TILE, :] / math.sqrt(q.shape[-1])  # (B, H, tq, d)
        last_query = offset + i + q_tile.shape[-2] - 1
        running_max = q_tile.new_full((*q_tile.shape[:-1], 1), float("-inf"))  # m
        running_sum = q_tile.new_zeros((*q_tile.shape[:-1], 1))  # l
        acc = torch.zeros_like(q_tile)
        for j in range(0, last_query + 1 if causal else n_keys, TILE):  # key 0 first: m is finite after it
            scores = q_tile @ k[..., j : j + TILE, :].transpose(-2, -1)  # (B, H, tq, tk)
            if causal:
                query = offset + i + torch.arange(scores.shape[-2], device=scores.device)
                key = j + torch.arange(scores.shape[-1], device=scores.device)
                scores = scores.masked_fill(key[None, :] > query[:, None], float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
            probs = (scores - new_max).exp()
            rescale = (running_max - new_max).exp()
            running_sum = running_sum * rescale + probs.sum(dim=-1, keepdim=True)
            acc = acc * rescale + probs @ v[..., j : j + TILE, :]
            running_max = new_max
        out.append(acc / running_sum)
    return torch.cat(out, dim=-2)
