"""The GPT: configuration, the pre-norm block, and the model from token ids to logits."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from gpt_core.attention import MultiHeadAttention
from gpt_core.functional import dropout
from gpt_core.hooks import HookFn, Hooks, block_hook, check_hooks, hook_names, replaced
from gpt_core.kernels import DEFAULT_KERNELS, Kernels
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

    `max_positions` is the range of position ids, 0 meaning block_size: learned positions keep a table of
    that many vectors, so a table longer than the training sequences can be read past them (its extra
    vectors stay as initialised). `randomized_positions` is Ruoss et al. (2023, "Randomized Positional
    Encodings Boost Length Generalization of Transformers") for learned and rotary positions: in
    training, each sequence's position ids are a sorted random subset of range(max_positions), which
    must then be larger than block_size, so every id a longer test sequence uses has been trained.
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
    max_positions: int = 0
    randomized_positions: bool = False

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
        self._check_position_range()

    def _check_position_range(self) -> None:
        """max_positions and randomized_positions: refused wherever they would have no effect."""
        n = self.max_positions
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"max_positions must be a non-negative integer (0: block_size), got {n!r}")
        if 0 < n < self.block_size:
            raise ValueError(f"max_positions ({n}) must be 0 (block_size) or at least block_size ({self.block_size})")
        if self.randomized_positions:
            if self.pos == "none":
                raise ValueError("randomized_positions needs pos=learned or pos=rope; pos=none has no positions")
            if n <= self.block_size:
                raise ValueError(
                    f"randomized_positions needs max_positions larger than block_size ({self.block_size}), got {n}: "
                    "training position ids are drawn from range(max_positions)"
                )
        elif n and self.pos != "learned":
            raise ValueError(
                f"max_positions sizes the learned table or the range of randomized_positions; with pos={self.pos} "
                "and randomized_positions off it would do nothing"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def position_limit(self) -> int | None:
        """The most positions a sequence may use: the learned table's length, or the range randomized
        ids are drawn from (n distinct ids need n <= max_positions); None when nothing limits it."""
        if self.pos == "learned" or self.randomized_positions:
            return self.max_positions or self.block_size
        return None

    def check_positions(self, n: int, what: str = "the input") -> None:
        """Raise ValueError if `what` needs n positions and the model's positions cannot hold them.

        Learned positions are a table of block_size (or max_positions) vectors: there is nothing to read
        past it. One check, with one message, for the model, generation and every task's evaluation.
        """
        limit = self.position_limit
        if limit is None or n <= limit:
            return
        if self.randomized_positions:
            raise ValueError(
                f"{what} needs {n} positions, more than max_positions {limit}: randomized positions are "
                "distinct ids drawn from range(max_positions)"
            )
        bound = f"max_positions {limit}" if self.max_positions else f"block_size {limit}"
        raise ValueError(
            f"{what} needs {n} positions, longer than {bound}: learned positions "
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


def _layer_norm_or_identity(config: GPTConfig, kernels: Kernels) -> nn.Module:
    """A LayerNorm computed by the `layer_norm` kernel, or the identity when the ablation turns it off."""
    return LayerNorm(config.n_embd, bias=config.bias, kernel=kernels.layer_norm) if config.layernorm else Identity()


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)).

    `hooks` are the model's hook points (`gpt_core.hooks`); a block fires those of its layer.
    """

    def __init__(
        self,
        config: GPTConfig,
        rope: RotaryEmbedding | None,
        kernels: Kernels = DEFAULT_KERNELS,
        hooks: Hooks | None = None,
    ):
        super().__init__()
        c = config
        self._hooks = Hooks() if hooks is None else hooks
        self.residual = c.residual
        self.ln1 = _layer_norm_or_identity(c, kernels)
        self.attn = MultiHeadAttention(
            c.n_embd, c.n_head, c.bias, c.dropout, rope, kernel=kernels.attention, hooks=self._hooks
        )
        self.ln2 = _layer_norm_or_identity(c, kernels)
        self.mlp = MLP(c.n_embd, c.bias, c.dropout, gelu=kernels.gelu)

    def forward(
        self,
        x: Tensor,
        layer: int = 0,
        cache: KVCache | None = None,
        positions: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        hooks = self._hooks  # each `if hooks:` is the whole cost of a hook point while none is set
        if hooks:
            x = hooks.fire(block_hook(layer, "resid_pre"), x)
        normed = self.ln1(x)
        if hooks:
            normed = hooks.fire(block_hook(layer, "ln1"), normed)
        attended, weights = self.attn(normed, layer, cache, positions, need_weights)
        if hooks:
            attended = hooks.fire(block_hook(layer, "attn_out"), attended)
        x = x + attended if self.residual else attended
        if hooks:
            x = hooks.fire(block_hook(layer, "resid_mid"), x)
        normed = self.ln2(x)
        if hooks:
            normed = hooks.fire(block_hook(layer, "ln2"), normed)
        transformed = self.mlp(normed)  # mlp_hidden: a PyTorch forward hook on mlp.act (`GPT.hooks`)
        if hooks:
            transformed = hooks.fire(block_hook(layer, "mlp_out"), transformed)
        x = x + transformed if self.residual else transformed
        if hooks:
            x = hooks.fire(block_hook(layer, "resid_post"), x)
        return x, weights


class GPT(nn.Module):
    """Decoder-only transformer: token (+ position) embedding, n_layer blocks, final norm, output head.

    `kernels` are the functions this model, and only this model, computes attention, softmax,
    LayerNorm, GELU and the loss with (gpt-core's own by default); they draw no random numbers, so
    the initial weights are the same whichever kernels are chosen.
    """

    def __init__(self, config: GPTConfig, kernels: Kernels = DEFAULT_KERNELS):
        super().__init__()
        kernels.check_dropout(config.dropout)
        self.config = config
        self.kernels = kernels
        self._hooks = Hooks()  # shared by every block: the hooks `hooks()` sets
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.position_limit, config.n_embd) if config.pos == "learned" else None
        # One rotary module shared by every layer: it holds no parameters, only frequencies.
        rope = RotaryEmbedding(config.head_dim) if config.pos == "rope" else None
        self.blocks = nn.ModuleList(Block(config, rope, kernels, self._hooks) for _ in range(config.n_layer))
        self.ln_f = _layer_norm_or_identity(config, kernels)
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

    def hook_names(self) -> list[str]:
        """The names `hooks` and `run_with_cache` accept for this model, in the order the forward
        reaches them (the README's table gives each one's shape)."""
        return hook_names(self.config.n_layer, self.wpe is not None)

    @contextmanager
    def hooks(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """Within the with-block, every forward (cached or not) passes each named activation to its
        fn(activation, name), which returns None to keep it or a tensor of the same shape to use
        instead (gradients flow through it). Nested blocks compose, outer hook first; each removes
        its own hooks when it ends, raising or not. An unknown name is a ValueError, nothing set."""
        check_hooks(fns, self.hook_names())
        # mlp_hidden lies inside MLP.forward: reached by PyTorch's forward hook on the block's GELU. The
        # store lists it too (never firing it), so that it is non-empty, and `hook_offset` set, while any hook is.
        gelus = {block_hook(layer, "mlp_hidden"): block.mlp.act for layer, block in enumerate(self.blocks)}
        handles = [
            gelus[name].register_forward_hook(_as_forward_hook(name, fn)) for name, fn in fns.items() if name in gelus
        ]
        try:
            with self._hooks.added(fns):
                yield
        finally:
            for handle in handles:
                handle.remove()

    @property
    def hook_offset(self) -> int:
        """For a hook, during a forward: the sequence index of the first of the T positions its activation
        (.., T, ..) holds, i.e. the KV cache's filled length before this call (0 without a cache)."""
        return self._hooks.offset

    def run_with_cache(
        self, idx: Tensor, names: Iterable[str] | None = None, **forward_kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The logits of `self(idx, **forward_kwargs)` and the named activations (every hook name when
        `names` is None), detached, keyed by name in forward order. Runs in the caller's grad mode:
        wrap it in torch.no_grad() when only the numbers are wanted."""
        wanted = self.hook_names() if names is None else list(names)
        recorded: dict[str, Tensor] = {}

        def record(activation: Tensor, name: str) -> None:
            recorded[name] = activation.detach()

        with self.hooks(dict.fromkeys(wanted, record)):
            logits = self(idx, **forward_kwargs).logits
        return logits, recorded

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        """An empty KV cache for `batch_size` sequences of up to `max_length` positions."""
        c = self.config
        p = self.wte.weight
        return KVCache(c.n_layer, batch_size, c.n_head, c.head_dim, max_length, p.device, p.dtype)

    def sample_positions(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> Tensor:
        """Randomized position ids (B, T): for each sequence, `length` distinct ids drawn uniformly from
        range(max_positions), in increasing order (Ruoss et al. 2023). Drawn with `generator`, on its
        device, or else with the global RNG on the model's device, as dropout is, so a seeded run and a
        resumed one draw the same ids."""
        self.config.check_positions(length, "the sequence")
        device = generator.device if generator is not None else self.wte.weight.device
        keys = torch.rand(batch_size, self.config.position_limit, device=device, generator=generator)  # (B, L)
        chosen = keys.topk(length, dim=1, sorted=False).indices  # a uniform random subset of each row's range
        return chosen.sort(dim=1).values.to(self.wte.weight.device)

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over the scored targets (those not equal to IGNORE_INDEX)."""
        return self.kernels.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # (N, V), (N,)

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        *,
        cache: KVCache | None = None,
        positions: Tensor | None = None,
        return_attention: bool = False,
    ) -> GPTOutput:
        """Token ids (B, T) -> GPTOutput: logits (B, T, V), the loss when targets (B, T) are given,
        and the attention weights (n_layer, B, n_head, T, T_total) when `return_attention` is set.

        Targets equal to IGNORE_INDEX are not scored. With a `cache`, `idx` holds only the new
        tokens, which sit after the cache's filled positions. `positions` (T,) or (B, T) gives the
        tokens' position ids; by default they are the next T after the cache's, except that a model
        with randomized_positions draws them (`sample_positions`) for every training forward.
        """
        B, T = idx.shape
        if positions is None:
            positions = self._default_positions(B, T, cache)
        elif self.config.position_limit is not None and int(positions.max()) >= self.config.position_limit:
            raise ValueError(f"position id {int(positions.max())} is outside range({self.config.position_limit})")
        hooks = self._hooks
        if hooks:
            hooks.offset = cache.length if cache is not None else 0  # where this call's T positions start
        x = self.wte(idx)  # (B, T, C)
        if hooks:
            x = hooks.fire("embed", x)
        if self.wpe is not None:
            position_vectors = self.wpe.weight[positions]  # (T, C) broadcast over B, or (B, T, C)
            if hooks:
                position_vectors = hooks.fire("pos_embed", position_vectors)
            x = x + position_vectors
        x = dropout(x, self.config.dropout, self.training)
        attention = []
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, layer, cache, positions, return_attention)
            if return_attention:
                attention.append(weights)
        if cache is not None:
            cache.advance(T)
        x = self.ln_f(x)
        if hooks:
            x = hooks.fire("ln_final", x)
        logits = self.lm_head(x)  # (B, T, V)
        if hooks:
            logits = hooks.fire("logits", logits)
        loss = self.loss(logits, targets) if targets is not None else None
        stacked = torch.stack(attention) if return_attention else None  # (L, B, H, T, T_total)
        return GPTOutput(logits, loss, stacked)

    def _default_positions(self, batch_size: int, length: int, cache: KVCache | None) -> Tensor:
        """Sampled ids (B, T) for a randomized model's training forward; otherwise the T ids after the
        cache's filled part, (T,)."""
        if self.training and self.config.randomized_positions and cache is None:
            return self.sample_positions(batch_size, length)
        offset = cache.length if cache is not None else 0
        self.config.check_positions(offset + length, "the sequence")
        return torch.arange(offset, offset + length, device=self.wte.weight.device)


def _as_forward_hook(name: str, fn: HookFn) -> Callable[[nn.Module, Any, Tensor], Tensor]:
    """`fn` as a PyTorch forward hook on the module whose output is the activation `name`."""

    def hook(module: nn.Module, args: Any, output: Tensor) -> Tensor:
        return replaced(name, output, fn(output, name))

    return hook
