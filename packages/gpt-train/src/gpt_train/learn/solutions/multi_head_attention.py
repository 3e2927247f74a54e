"""The multi_head_attention step's answer: one fused qkv projection, split into heads, attention, heads merged,
output projection."""

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, attention):
        super().__init__()
        self.n_head, self.attention = n_head, attention
        self.qkv = nn.Linear(n_embd, 3 * n_embd)  # q, k and v of every head in one product
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C)."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        y = self.attention(q, k, v, True)  # (B, H, T, d)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # heads side by side again: (B, T, C)
