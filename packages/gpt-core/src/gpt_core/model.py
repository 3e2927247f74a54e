"""The GPT: configuration, the pre-norm block, and the model from token ids to logits."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from gpt_core.attention import MultiHeadAttention
from gpt_core.functional import IGNORE_INDEX, cross_entropy, dropout
from gpt_core.kv_cache import KVCache
from gpt_core.layers import MLP, Embedding, LayerNorm, Linear
from gpt_core.rope import RotaryEmbedding

PositionEncoding = Literal["learned", "rope", "none"]
POSITION_ENCODINGS = ("learned", "rope", "none")


@dataclass(frozen=True)
class GPTConfig:
    """Everything that fixes a model's shape. Validated on construction.

    pos: "learned" (a table of block_size position vectors), "rope" (rotary, applied to queries
    and keys) or "none" (causal attention alone must infer order). `layernorm` and `residual`
    switch those parts off for ablations; `tie_weights` shares the token embedding with the
    output head. `init_scale` multiplies every initial weight matrix (GPT-2's std 0.02 init): a
    larger weight norm at initialisation delays generalisation, the lever behind grokking (Liu et
    al. 2022, "Omnigrok"); 1.0 is GPT-2's init exactly.
    """

    vocab_size: int
    block_size: int
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True
    pos: PositionEncoding = "learned"
    layernorm: bool = True
    residual: bool = True
    tie_weights: bool = True
    init_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.pos not in POSITION_ENCODINGS:
            raise ValueError(f"pos must be one of {', '.join(POSITION_ENCODINGS)}, got {self.pos!r}")
        if self.pos == "rope" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head size, got n_embd / n_head = {self.head_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        scale = self.init_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
            raise ValueError(f"init_scale must be a positive finite number, got {scale!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def check_positions(self, n: int, what: str = "the input") -> None:
        """Raise ValueError if `what` needs n positions and learned positions cannot hold them.

        Learned positions are a table of block_size vectors: there is nothing to read past it. One
        check, with one message, for the model, generation and every task's evaluation.
        """
        if self.pos == "learned" and n > self.block_size:
            raise ValueError(
                f"{what} needs {n} positions, longer than block_size {self.block_size}: learned positions "
                "have no vectors past their table (use pos=rope or pos=none to run past it)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GPTConfig:
        """Build from a mapping, refusing keys that are not fields (a typo must not pass silently)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)


class GPTOutput(NamedTuple):
    """What one forward pass gives, always in this one shape, so callers name what they use
    (`model(x).logits`) instead of counting tuple positions that change with flags."""

    logits: Tensor  # (B, T, V)
    loss: Tensor | None  # scalar; None without targets
    attention: Tensor | None  # (n_layer, B, n_head, T, T_total); None unless return_attention


class Identity(nn.Module):
    """Stands in for LayerNorm in the no-LayerNorm ablation."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig, rope: RotaryEmbedding | None):
        super().__init__()
        self.residual = config.residual
        self.ln1 = LayerNorm(config.n_embd, bias=config.bias) if config.layernorm else Identity()
        self.attn = MultiHeadAttention(config.n_embd, config.n_head, config.bias, config.dropout, rope)
        self.ln2 = LayerNorm(config.n_embd, bias=config.bias) if config.layernorm else Identity()
        self.mlp = MLP(config.n_embd, config.bias, config.dropout)

    def forward(self, x: Tensor, layer: int = 0, cache: KVCache | None = None) -> tuple[Tensor, Tensor]:
        attended, weights = self.attn(self.ln1(x), layer, cache)
        x = x + attended if self.residual else attended
        transformed = self.mlp(self.ln2(x))
        x = x + transformed if self.residual else transformed
        return x, weights


class GPT(nn.Module):
    """Decoder-only transformer: token (+ position) embedding, n_layer blocks, final norm, output head."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.block_size, config.n_embd) if config.pos == "learned" else None
        # One rotary module shared by every layer: it holds no parameters, only frequencies.
        rope = RotaryEmbedding(config.head_dim) if config.pos == "rope" else None
        self.blocks = nn.ModuleList(Block(config, rope) for _ in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, bias=config.bias) if config.layernorm else Identity()
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        self._scale_residual_projections()
        self._scale_initial_weights()

    def _scale_residual_projections(self) -> None:
        """GPT-2's init: each residual branch's output projection gets std 0.02 / sqrt(2 n_layer),
        so the residual stream's variance does not grow with depth."""
        std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, std=std)
            nn.init.normal_(block.mlp.proj.weight, std=std)

    def _scale_initial_weights(self) -> None:
        """Multiply every weight matrix by `init_scale` (Omnigrok's alpha), after GPT-2's init so that
        the random draws, and with 1.0 the weights themselves, are those of the unscaled model. Norms
        and biases (vectors) keep their 1 and 0; a tied embedding is scaled once."""
        with torch.no_grad():
            for param in self.parameters():  # each tensor once, however many modules share it
                if param.dim() >= 2:
                    param.mul_(self.config.init_scale)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        """An empty KV cache for `batch_size` sequences of up to `max_length` positions."""
        c = self.config
        p = self.wte.weight
        return KVCache(c.n_layer, batch_size, c.n_head, c.head_dim, max_length, p.device, p.dtype)

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over the scored targets (those not equal to IGNORE_INDEX)."""
        return cross_entropy(logits, targets, IGNORE_INDEX)

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        *,
        cache: KVCache | None = None,
        return_attention: bool = False,
    ) -> GPTOutput:
        """Token ids (B, T) -> GPTOutput: logits (B, T, V), the loss when targets (B, T) are given,
        and the attention weights (n_layer, B, n_head, T, T_total) when `return_attention` is set.

        Targets equal to IGNORE_INDEX are not scored. With a `cache`, `idx` holds only the new
        tokens, which sit after the cache's filled positions.
        """
        B, T = idx.shape
        offset = cache.length if cache is not None else 0
        x = self.wte(idx)  # (B, T, C)
        if self.wpe is not None:
            self.config.check_positions(offset + T, "the sequence")
            x = x + self.wpe.weight[offset : offset + T]  # (T, C) broadcast over B
        x = dropout(x, self.config.dropout, self.training)
        attention = []
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, layer, cache)
            if return_attention:
                attention.append(weights)
        if cache is not None:
            cache.advance(T)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = self.loss(logits, targets) if targets is not None else None
        stacked = torch.stack(attention) if return_attention else None  # (L, B, H, T, T_total)
        return GPTOutput(logits, loss, stacked)
