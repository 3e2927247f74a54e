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
    raise NotImplementedError
