"""The block step's answer: the pre-norm residual block, x + attn(ln1(x)), then x + mlp(ln2(x)), with the
MultiHeadAttention of the step before."""

import torch
from multi_head_attention import MultiHeadAttention
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, kernel):
        super().__init__()
        self.weight, self.bias, self.kernel = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim)), kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.weight, self.bias, 1e-5)


class MLP(nn.Module):
    def __init__(self, n_embd: int, gelu):
        super().__init__()
        self.fc, self.gelu, self.proj = nn.Linear(n_embd, 4 * n_embd), gelu, nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, kernels):
        super().__init__()
        self.ln1 = LayerNorm(n_embd, kernels.layer_norm)
        self.attn = MultiHeadAttention(n_embd, n_head, kernels.attention)
        self.ln2 = LayerNorm(n_embd, kernels.layer_norm)
        self.mlp = MLP(n_embd, kernels.gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C): each sub-layer reads a normalised copy and adds to the stream x itself."""
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
