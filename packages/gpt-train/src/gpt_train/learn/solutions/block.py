"""Step 10: the pre-norm transformer block, GPT-2's: each sub-layer reads a normalised copy of the residual stream
x and adds its result back to x itself.

    x = x + attn(ln1(x))                 attention: positions exchange information
    x = x + mlp(ln2(x))                  the MLP: each position on its own, fc (C -> 4C), GELU, proj (4C -> C)

The stream x is never normalised in place: the norms feed the sub-layers only (post-norm, the original
Transformer's ln(x + attn(x)), trains worse deep). Your MultiHeadAttention comes from multi_head_attention.py,
step 9's file beside this one. The parameters carry gpt-core's names (ln1, attn.qkv, attn.proj, ln2, mlp.fc,
mlp.proj): the check copies gpt_core.Block's weights into yours and compares the output and every gradient in float64.

Check it with `gpt-train learn check block`: it hands your block `kernels`, with kernels.attention(q, k, v, causal),
kernels.layer_norm(x, weight, bias, eps) and kernels.gelu(x) (your kernel steps' signatures); PyTorch's own
(nn.LayerNorm, nn.GELU, F.scaled_dot_product_attention ...) and gpt-core's modules are refused.
"""

import torch
from multi_head_attention import MultiHeadAttention  # yours, from step 9
from torch import nn


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, kernels):
        super().__init__()
        self.ln1 = LayerNorm(n_embd, kernels.layer_norm)
        self.attn = MultiHeadAttention(n_embd, n_head, kernels.attention)
        self.ln2 = LayerNorm(n_embd, kernels.layer_norm)
        self.mlp = MLP(n_embd, kernels.gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C)."""
        # BEGIN SOLUTION
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
        # END SOLUTION


class MLP(nn.Module):
    def __init__(self, n_embd: int, gelu):
        super().__init__()
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = gelu
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C): proj(gelu(fc(x)))."""
        # BEGIN SOLUTION
        return self.proj(self.gelu(self.fc(x)))
        # END SOLUTION


class LayerNorm(nn.Module):
    """A LayerNorm module around the layer_norm kernel: its weight and bias are parameters (eps 1e-5)."""

    def __init__(self, dim: int, kernel):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.weight, self.bias, 1e-5)
