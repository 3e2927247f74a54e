"""Rotary position embedding (RoPE), by hand.

Each pair of channels (i, i + d/2) of a query or key at position m is rotated by the angle
m * base^(-2i/d). The dot product of a rotated query at m and key at n then depends on the
positions only through m - n, which is why RoPE needs no table and can run past the length
it was trained on.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got {head_dim}")
        self.head_dim = head_dim
        self.base = base
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
        # float32, not float64: Apple's MPS backend has no float64 tensors.
        self.register_buffer("inv_freq", (base**-exponents).float(), persistent=False)  # (d/2,)

    def angles(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles at integer `positions` (T,) or (B, T): each (..., T, d/2)."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        device = self.inv_freq.device
        if work == torch.float64:
            # Recomputed in float64: the float32 buffer's rounding (~6e-8 relative) would put
            # errors of ~1e-7 into a float64 model's rotations by position 64.
            exponents = torch.arange(0, self.head_dim, 2, device=device, dtype=work) / self.head_dim
            inv_freq = self.base**-exponents
        else:
            inv_freq = self.inv_freq.to(work)
        theta = positions.to(device=device, dtype=work)[..., None] * inv_freq  # (..., T, d/2)
        return theta.cos().to(dtype), theta.sin().to(dtype)

    def forward(self, x: Tensor, positions: int | Tensor = 0) -> Tensor:
        """x: (B, H, T, d) -> rotated x of the same shape.

        `positions` is where x's tokens sit: an int offset (positions offset .. offset + T - 1), or
        the position ids themselves, (T,) shared by the batch or (B, T) one row per sequence (the
        randomized positions of Ruoss et al. 2023 are increasing but not consecutive).
        """
        if isinstance(positions, int):
            positions = torch.arange(positions, positions + x.shape[-2], device=x.device)
        cos, sin = self.angles(positions, x.dtype)
        if positions.dim() == 2:  # (B, T, d/2) -> (B, 1, T, d/2): one rotation per sequence, shared by heads
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, d/2) each
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
