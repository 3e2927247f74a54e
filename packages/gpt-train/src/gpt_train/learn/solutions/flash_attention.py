"""Step 8: FlashAttention: the same attention, in tiles, never forming the (Tq, Tk) scores.

Cut the queries and the keys into tiles of TILE. For each query tile keep, per row, a running max m, a
running sum l and an unnormalised output acc, and visit the key tiles left to right:

    s = q_tile k_tile^T / sqrt(d)              (tile, tile), -inf where a key lies after its query
    m_new = max(m, rowmax(s))
    p = exp(s - m_new)
    l = l * exp(m - m_new) + rowsum(p)         what was summed so far was measured against the old max
    acc = acc * exp(m - m_new) + p v_tile
    m = m_new
and the tile's output is acc / l (the online softmax). Query i still sits at position Tk - Tq + i.

Check it with `gpt-train learn check flash_attention`: it runs T = 512 and refuses any tensor larger than
a 128 x 128 tile (or the inputs), and F.scaled_dot_product_attention and torch.softmax. Autograd may derive
the backward: each operation it records is a tile.
"""

import torch

TILE = 64


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d) -> (B, H, Tq, d), tile by tile.

    Hints: q[..., i : i + TILE, :] is a tile (the last one may be shorter); collect the output tiles in a
    list and torch.cat them (in-place writes into one tensor get in autograd's way); with causal, a key tile
    that starts after the query tile's last position can be skipped.
    """
    # BEGIN SOLUTION
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    offset = n_keys - n_queries
    out = []
    for i in range(0, n_queries, TILE):
        q_tile = q[..., i : i + TILE, :] / q.shape[-1] ** 0.5  # (B, H, tq, d)
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
    # END SOLUTION
