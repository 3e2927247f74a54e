"""A key/value cache for incremental decoding: each layer keeps the keys and values it has computed in buffers
preallocated for the whole generation, so a step costs one token's projections and one row of attention. `store`
returns the filled part; `write` the whole buffers, the same shapes every step (`gpt_core.decode`). A randomized
model's cache also holds each slot's position id, drawn once for the whole generation."""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Preallocated keys and values for every layer, how many positions are filled, and the slots' position ids
    (`positions`, (B, T_max); None: slot i is position i)."""

    def __init__(self, n_layer: int, batch_size: int, n_head: int, head_dim: int, max_length: int,
                 device: torch.device | str, dtype: torch.dtype, positions: Tensor | None = None):  # fmt: skip
        if positions is not None and tuple(positions.shape) != (batch_size, max_length):
            raise ValueError(f"the cache's position ids must be (batch, max_length) = {(batch_size, max_length)}, "
                             f"got {tuple(positions.shape)}")  # fmt: skip
        shape = (n_layer, batch_size, n_head, max_length, head_dim)  # (L, B, H, T_max, d)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        # (B, T_max) or None; a copy, so that the ids checked when the cache is made are the ids it uses
        self.positions = None if positions is None else positions.to(device, copy=True)
        self.positions_checked = False  # against a model's range, once (`positions.forward_positions`)
        self.batch_size, self.max_length = batch_size, max_length
        self.length = 0

    def check_fits(self, batch_size: int, n_positions: int) -> None:
        """Raise ValueError unless n more positions of `batch_size` sequences fit: on the host, before any write."""
        if batch_size != self.batch_size:
            raise ValueError(f"the KV cache holds {self.batch_size} sequences, the input {batch_size}")
        if self.length + n_positions > self.max_length:
            needed = self.length + n_positions
            raise ValueError(f"KV cache is full: {needed} positions needed, {self.max_length} allocated")

    def next_positions(self, n_positions: int) -> Tensor | None:
        """The ids (B, n) of the next n slots, or None where slot i is position i."""
        if self.positions is None:
            return None
        return self.positions[:, self.length : self.length + n_positions]

    def store(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (B, H, T, d) after the filled part; return all filled keys and values. `length` moves on once
        per forward, in `advance`, after every layer has stored."""
        self.check_fits(k.shape[0], k.shape[-2])
        end = self.length + k.shape[-2]
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        keys, values = self.keys[layer, :, :, :end], self.values[layer, :, :, :end]  # (B, H, end, d) views
        if torch.is_grad_enabled() and (keys.requires_grad or values.requires_grad):  # this write's or an earlier
            # the next layer's (or forward's) write changes the buffers in place: a backward needs its own copy
            return keys.clone(), values.clone()
        return keys, values

    def advance(self, n_positions: int) -> None:
        self.length += n_positions

    def write(self, layer: int, k: Tensor, v: Tensor, at: Tensor) -> tuple[Tensor, Tensor]:
        """Write one step's k, v (B, H, 1, d) at the device position `at`; return the whole buffers to mask. Nothing
        is read back to the host, so a CUDA graph can record it; `length` is the caller's to advance."""
        keys, values = self.keys[layer], self.values[layer]  # (B, H, T_max, d) views into the buffers
        keys.index_copy_(2, at, k.to(keys.dtype))
        values.index_copy_(2, at, v.to(values.dtype))
        return keys, values
