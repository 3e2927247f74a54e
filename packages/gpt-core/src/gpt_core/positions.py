"""Where each token sits: learned positions, rotary positions (RoPE), randomized ids, and the limit.

- learned: a table of position vectors added to the token embeddings, one per id in range(position_limit).
- rope: channels (i, i + d/2) of a query or key at position m are rotated by the angle m * base^(-2i/d), so a
  query at m and a key at n interact through m - n alone: no table, and it runs past the trained length.
- none: causal attention alone must infer order.
- randomized ids (Ruoss et al. 2023): in training each sequence's ids are a sorted random subset of
  range(max_positions) > block_size, so every id a longer test sequence uses has been trained.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from gpt_core.kv_cache import KVCache
    from gpt_core.model import GPTConfig

PositionEncoding = Literal["learned", "rope", "none"]
POSITION_ENCODINGS = ("learned", "rope", "none")


def check_position_fields(c: GPTConfig) -> None:
    """Raise ValueError for positions that cannot work or settings that would have no effect."""
    if c.pos not in POSITION_ENCODINGS:
        raise ValueError(f"pos must be one of {', '.join(POSITION_ENCODINGS)}, got {c.pos!r}")
    if c.pos == "rope" and c.head_dim % 2:
        raise ValueError(f"RoPE needs an even head size, got n_embd / n_head = {c.head_dim}")
    n = c.max_positions
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"max_positions must be a non-negative integer (0: block_size), got {n!r}")
    if 0 < n < c.block_size:
        raise ValueError(f"max_positions ({n}) must be 0 (block_size) or at least block_size ({c.block_size})")
    if c.randomized_positions:
        if c.pos == "none":
            raise ValueError("randomized_positions needs pos=learned or pos=rope; pos=none has no positions")
        if n <= c.block_size:
            raise ValueError(
                f"randomized_positions needs max_positions larger than block_size ({c.block_size}), got {n}: "
                "training position ids are drawn from range(max_positions)"
            )
    elif n and c.pos != "learned":
        raise ValueError(
            f"max_positions sizes the learned table or the range of randomized_positions; with pos={c.pos} "
            "and randomized_positions off it would do nothing"
        )


def position_limit(c: GPTConfig) -> int | None:
    """The most positions a sequence may use (None: no limit)."""
    if c.pos == "learned" or c.randomized_positions:
        return c.max_positions or c.block_size
    return None


def check_positions(c: GPTConfig, n: int, what: str = "the input") -> None:
    """Raise ValueError if `what` needs n positions and the model's positions cannot hold them."""
    limit = position_limit(c)
    if limit is None or n <= limit:
        return
    if c.randomized_positions:
        raise ValueError(
            f"{what} needs {n} positions, more than max_positions {limit}: randomized positions are "
            "distinct ids drawn from range(max_positions)"
        )
    bound = f"max_positions {limit}" if c.max_positions else f"block_size {limit}"
    raise ValueError(
        f"{what} needs {n} positions, longer than {bound}: learned positions "
        "have no vectors past their table (use pos=rope or pos=none to run past it)"
    )


def sample_positions(
    c: GPTConfig, batch_size: int, length: int, device: torch.device, generator: torch.Generator | None = None
) -> Tensor:
    """Randomized position ids (B, T): per sequence, `length` distinct sorted ids from range(max_positions). Drawn
    with `generator` on its device, else the global RNG on `device` as dropout is: a resumed run draws the same."""
    check_positions(c, length, "the sequence")
    where = generator.device if generator is not None else device
    keys = torch.rand(batch_size, position_limit(c), device=where, generator=generator)  # (B, L)
    chosen = keys.topk(length, dim=1, sorted=False).indices  # a uniform random subset of each row's range
    return chosen.sort(dim=1).values.to(device)


def forward_positions(
    c: GPTConfig,
    batch_size: int,
    length: int,
    given: Tensor | None,
    cache: KVCache | None,
    training: bool,
    device: torch.device,
) -> Tensor:
    """A forward's ids: those `given`, checked; else the cache's next slots' (B, T) where it holds ids, sampled
    (B, T) in randomized training, else the next T (T,). A cache is checked to hold the batch and room for T more."""
    if cache is not None:
        cache.check_fits(batch_size, length)
    if given is not None:
        if tuple(given.shape) not in ((length,), (1, length), (batch_size, length)):
            raise ValueError(f"positions must be (T,) = ({length},) or (B, T) = ({batch_size}, {length}) (or (1, T)), "
                             f"got {tuple(given.shape)}")  # fmt: skip
        check_position_ids(c, given)
        return given
    held = cache.next_positions(length) if cache is not None else None
    if held is not None:
        check_held_positions(c, cache)  # `GPT.new_cache` has; a KVCache made by hand is checked here, once
        return held  # no read from the device a token
    if training and c.randomized_positions and cache is None:
        return sample_positions(c, batch_size, length, device)
    start = cache.length if cache is not None else 0
    check_positions(c, start + length, "the sequence")
    return torch.arange(start, start + length, device=device)


def check_held_positions(c: GPTConfig, cache: KVCache) -> None:
    """Check the ids a KV cache holds (if any) once for the whole cache, however it was made."""
    if cache.positions is not None and not cache.positions_checked:
        check_position_ids(c, cache.positions)
        cache.positions_checked = True


def check_position_ids(c: GPTConfig, positions: Tensor) -> None:
    """Raise ValueError unless the given position ids are integers (int64 or int32) in the range the model has."""
    if positions.dtype not in (torch.int64, torch.int32):  # RoPE would take a float or bool as an angle
        raise ValueError(f"position ids must be int64 (or int32), got {positions.dtype}")
    if positions.numel() == 0:
        return
    limit = position_limit(c)
    low, high = torch.stack(positions.aminmax()).tolist()  # one read from the device
    if low < 0:
        raise ValueError(f"position id {low} is negative")
    if limit is not None and high >= limit:
        raise ValueError(f"position id {high} is outside range({limit})")


class RotaryEmbedding(nn.Module):
    """Rotary position embedding: rotates queries and keys by their positions (no parameters)."""

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
        device, inv_freq = self.inv_freq.device, self.inv_freq
        if work == torch.float64 or inv_freq.dtype != torch.float32:
            # Recomputed: in float64 the float32 buffer's rounding, which grows with the position, is far above
            # float64's; a buffer that model.to(bfloat16) rounded to 16 bits is further off.
            exponents = torch.arange(0, self.head_dim, 2, device=device, dtype=work) / self.head_dim
            inv_freq = self.base**-exponents
        theta = positions.to(device=device, dtype=work)[..., None] * inv_freq  # (..., T, d/2)
        return theta.cos().to(dtype), theta.sin().to(dtype)

    def forward(self, x: Tensor, positions: int | Tensor = 0) -> Tensor:
        """x (B, H, T, d) rotated by `positions`: an int offset, or the ids, (T,) or (B, T) one row per sequence."""
        if isinstance(positions, int):
            positions = torch.arange(positions, positions + x.shape[-2], device=x.device)
        cos, sin = self.angles(positions, x.dtype)
        if positions.dim() == 2:  # (B, T, d/2) -> (B, 1, T, d/2): one rotation per sequence, shared by heads
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, d/2) each
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
