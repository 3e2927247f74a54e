"""A key/value cache for incremental decoding: each layer keeps the keys and values it has computed in buffers
preallocated for the whole generation, so a step costs one token's projections and one row of attention. `store`
returns the filled part; `write` the whole buffers, the same shapes every step (`gpt_core.decode`)."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Preallocated keys and values for every layer, and how many positions are filled."""

    def __init__(self, n_layer: int, batch_size: int, n_head: int, head_dim: int, max_length: int,
                 device: torch.device | str, dtype: torch.dtype):  # fmt: skip
        shape = (n_layer, batch_size, n_head, max_length, head_dim)  # (L, B, H, T_max, d)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.max_length = max_length
        self.length = 0

    def store(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (B, H, T, d) after the filled part; return all filled keys and values. `length` moves on once
        per forward, in `advance`, after every layer has stored."""
        end = self.length + k.shape[-2]
        if end > self.max_length:
            raise ValueError(f"KV cache is full: {end} positions needed, {self.max_length} allocated")
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, n_positions: int) -> None:
        self.length += n_positions

    def write(self, layer: int, k: Tensor, v: Tensor, at: Tensor) -> tuple[Tensor, Tensor]:
        """Write one step's k, v (B, H, 1, d) at the device position `at`; return the whole buffers to mask. Nothing
        is read back to the host, so a CUDA graph can record it; `length` is the caller's to advance."""
        keys, values = self.keys[layer], self.values[layer]  # (B, H, T_max, d) views into the buffers
        keys.index_copy_(2, at, k.to(keys.dtype))
        values.index_copy_(2, at, v.to(values.dtype))
        return keys, values
