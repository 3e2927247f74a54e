"""Step 9: multi-head attention, the module: one fused projection makes q, k and v for every head, the heads are
split apart, attend in parallel, and are merged back and projected.

    qkv = x W_qkv^T + b_qkv            (B, T, 3C): [q | k | v], C features each
    q, k, v                            each (B, T, C) -> (B, H, T, d): head h owns features h*d .. (h+1)*d - 1
    y = attention(q, k, v, True)       (B, H, T, d)
    merged                             (B, H, T, d) -> (B, T, H, d) -> (B, T, C): the heads side by side
    out = merged W_proj^T + b_proj     (B, T, C)

C = n_embd, H = n_head, d = C / H. The parameters carry gpt-core's names (qkv, proj): the check copies
gpt_core.MultiHeadAttention's weights into yours and compares the output and every gradient in float64.

Check it with `gpt-train learn check multi_head_attention`: it hands your module an attention kernel, and refuses
PyTorch's (F.scaled_dot_product_attention, nn.MultiheadAttention, torch.softmax) and gpt-core's modules.
"""

import torch
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, attention):
        super().__init__()
        self.n_head = n_head
        self.attention = attention  # attention(q, k, v, causal): your step-2 kernel's signature
        self.qkv = nn.Linear(n_embd, 3 * n_embd)  # q, k and v of every head in one product
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C).

        Hints: .view(B, T, 3, H, d) then .permute(2, 0, 3, 1, 4) gives q, k and v as (B, H, T, d) in one line. A
        view reads the memory in order, a transpose moves an axis: (B, T, C) never becomes (B, H, T, d) by a view
        alone. After .transpose(1, 2) the tensor is not contiguous: merge with .reshape, not .view.
        """
        # BEGIN SOLUTION
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        y = self.attention(q, k, v, True)  # (B, H, T, d)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # heads side by side again: (B, T, C)
        # END SOLUTION
