"""The GPT, all of it in this file: configuration, attention, MLP, the pre-norm block, the model.

Every hand-written piece of arithmetic is a call into the model's kernel table, `self.kernels`: the fast set by
default, or the reference set, each piece as its definition in plain autograd. Read this file, then `reference.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from gpt_core import positions as pos
from gpt_core.hooks import HookFn, HookPoints, Hooks, check_hooks, hook_names
from gpt_core.kernels import DEFAULT_KERNELS, Kernels
from gpt_core.kernels.linear import check_read, embedding, first_read_position, linear, read_rows
from gpt_core.kv_cache import KVCache
from gpt_core.positions import PositionEncoding, RotaryEmbedding


@dataclass(frozen=True)
class GPTConfig:
    """Everything that fixes a model's shape, validated on construction.

    pos, max_positions (0: block_size) and randomized_positions: see `gpt_core.positions`. `layernorm`, `residual`
    and `mlp` switch those parts off. `init_scale` multiplies every initial weight matrix: a larger weight norm
    delays generalisation, the lever behind grokking (Liu et al. 2022, "Omnigrok"); 1.0 is GPT-2's init exactly.
    `tie_weights` shares the token embedding with the output head.
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
    mlp: bool = True
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
        for name in ("bias", "layernorm", "residual", "mlp", "tie_weights", "randomized_positions"):
            if not isinstance(getattr(self, name), bool):  # the string "False" is true
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        scale = self.init_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < math.inf:
            raise ValueError(f"init_scale must be a positive finite number, got {scale!r}")
        pos.check_position_fields(self)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def position_limit(self) -> int | None:
        """The most positions a sequence may use (None: no limit); see `gpt_core.positions`."""
        return pos.position_limit(self)

    def check_positions(self, n: int, what: str = "the input") -> None:
        """Raise ValueError if `what` needs n positions and the model's positions cannot hold them."""
        pos.check_positions(self, n, what)

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
    """What a forward pass gives: nanoGPT's pair, so `logits, loss = model(x, y)` unpacks, and named, so
    callers can say what they use (`model(x).logits`). The attention weights are hook points."""

    logits: Tensor  # (B, T, V); (N, V) with `read`
    loss: Tensor | None  # scalar; None without targets


class Linear(nn.Module):
    """y = x W^T + b (`kernels/linear.py` computes it as one addmm)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Embedding(nn.Module):
    """A lookup table: row i of the weight is the vector for id i."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, ids: Tensor) -> Tensor:
        return embedding(ids, self.weight)


class LayerNorm(nn.Module):
    """Normalise the last dimension to zero mean and unit variance, then scale and shift (by `kernel`)."""

    def __init__(self, dim: int, bias: bool = True, eps: float = 1e-5,
                 kernel: Callable[..., Tensor] = DEFAULT_KERNELS.layer_norm):  # fmt: skip
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
        self.kernel = kernel

    def forward(self, x: Tensor) -> Tensor:
        return self.kernel(x, self.weight, self.bias, self.eps)


class Identity(nn.Module):
    """Stands in for LayerNorm in the no-LayerNorm ablation."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class GELU(nn.Module):
    """The tanh-approximated GELU (no parameters), computed by `kernel`."""

    def __init__(self, kernel: Callable[[Tensor], Tensor] = DEFAULT_KERNELS.gelu):
        super().__init__()
        self.kernel = kernel

    def forward(self, x: Tensor) -> Tensor:
        return self.kernel(x)


class MultiHeadAttention(HookPoints, nn.Module):
    """Causal self-attention: one fused qkv projection, split into heads, attention, output projection. The k and v
    hooks see this call's new positions before they enter the cache: a replacement is what later steps attend to."""

    def __init__(self, n_embd: int, n_head: int, bias: bool, dropout_p: float, rope: RotaryEmbedding | None = None,
                 kernels: Kernels = DEFAULT_KERNELS, hooks: Hooks | None = None, layer: int = 0):  # fmt: skip
        super().__init__()
        self.n_head, self.layer, self.dropout_p, self.kernels = n_head, layer, dropout_p, kernels
        self.qkv = Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = Linear(n_embd, n_embd, bias=bias)
        self.rope = rope
        self.hook_points(hooks, f"blocks.{layer}.")

    def forward(self, x: Tensor, cache: KVCache | None = None, positions: Tensor | None = None,
                first_read: int = 0) -> Tensor:  # fmt: skip
        """x (B, T, C) -> (B, T - first_read, C): every position is a key, those from the first one read on are
        queries too (the causal kernel aligns queries to the end, as for a cache). RoPE rotates by `positions`."""
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).split(C, 2))  # (B, H, T, d)
        if self.rope is not None:
            at = positions if positions is not None else (cache.length if cache is not None else 0)
            q, k = self.rope(q, at), self.rope(k, at)
        q, k, v = self.hook("q", q)[:, :, first_read:], self.hook("k", k), self.hook("v", v)  # q (B, H, T', d)
        if cache is not None:
            k, v = cache.store(self.layer, k, v)  # (B, H, T_total, d)
        p = self.dropout_p if self.training else 0.0  # only a kernel taking dropout_p is given p > 0
        if self.hooked("pattern"):  # the weights (B, H, T', T_total), for the hook to read or replace, times v
            weights = self.hook("pattern", self.kernels.attention_weights(q, k, True))  # (B, H, T', T_total)
            y = self.kernels.dropout(weights, p, True) @ v
        else:
            y = self.kernels.attention(q, k, v, True, dropout_p=p) if p else self.kernels.attention(q, k, v, True)
        y = self.hook("z", y).transpose(1, 2).reshape(B, T - first_read, C)  # (B, T', C)
        return self.kernels.dropout(self.proj(y), self.dropout_p, self.training)


class MLP(HookPoints, nn.Module):
    """Position-wise feed-forward: expand 4x, GELU (hook point mlp_hidden), project back."""

    def __init__(self, n_embd: int, bias: bool, dropout_p: float, kernels: Kernels = DEFAULT_KERNELS,
                 hooks: Hooks | None = None, layer: int = 0):  # fmt: skip
        super().__init__()
        self.fc = Linear(n_embd, 4 * n_embd, bias=bias)
        self.act = GELU(kernels.gelu)
        self.proj = Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout_p, self.kernels = dropout_p, kernels
        self.hook_points(hooks, f"blocks.{layer}.")

    def forward(self, x: Tensor) -> Tensor:
        h = self.hook("mlp_hidden", self.act(self.fc(x)))  # (B, T, 4C); (N, 4C) in the last block with `read`
        return self.kernels.dropout(self.proj(h), self.dropout_p, self.training)


def _norm(config: GPTConfig, kernels: Kernels) -> nn.Module:
    """A LayerNorm computed by the `layer_norm` kernel, or the identity when the ablation turns it off."""
    return LayerNorm(config.n_embd, bias=config.bias, kernel=kernels.layer_norm) if config.layernorm else Identity()


class Block(HookPoints, nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then (unless attention-only) x + mlp(ln2(x)); block `layer`."""

    def __init__(self, config: GPTConfig, layer: int = 0, kernels: Kernels = DEFAULT_KERNELS,
                 hooks: Hooks | None = None, rope: RotaryEmbedding | None = None):  # fmt: skip
        super().__init__()
        c = config
        self.hook_points(hooks, f"blocks.{layer}.")
        self.residual = c.residual
        self.ln1 = _norm(c, kernels)
        self.attn = MultiHeadAttention(c.n_embd, c.n_head, c.bias, c.dropout, rope, kernels, self._hooks, layer)
        self.ln2 = _norm(c, kernels) if c.mlp else None
        self.mlp = MLP(c.n_embd, c.bias, c.dropout, kernels, self._hooks, layer) if c.mlp else None

    def forward(self, x: Tensor, cache: KVCache | None = None, positions: Tensor | None = None,
                read: Tensor | None = None) -> Tensor:  # fmt: skip
        x = self.hook("resid_pre", x)
        first_read = first_read_position(read) if read is not None and not self._hooks else 0  # before: keys only
        a = self.hook("attn_out", self.attn(self.hook("ln1", self.ln1(x)), cache, positions, first_read))  # (B, T', C)
        x = self.hook("resid_mid", x[:, first_read:] + a if self.residual else a)
        x = x if read is None else read_rows(x, read[:, first_read:])  # (N, C): the MLP runs only where read
        if self.mlp is None:  # attention-only
            return self.hook("resid_post", x)
        m = self.hook("mlp_out", self.mlp(self.hook("ln2", self.ln2(x))))
        return self.hook("resid_post", x + m if self.residual else m)


class GPT(HookPoints, nn.Module):
    """Decoder-only transformer: token (+ position) embedding, n_layer blocks, final norm, output head. `kernels` draw
    no random numbers, so the initial weights are the same whichever set is chosen."""

    def __init__(self, config: GPTConfig, kernels: Kernels = DEFAULT_KERNELS):
        super().__init__()
        if not isinstance(kernels, Kernels):
            raise TypeError(
                f"kernels must be a Kernels set, such as gpt_core.KERNEL_SETS['reference'], not {kernels!r}"
            )
        kernels.check_dropout(config.dropout)
        self.config = config
        self._kernels = kernels
        self.hook_points(None)  # the hooks `hooks()` sets, shared by every block
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.position_limit, config.n_embd) if config.pos == "learned" else None
        rope = RotaryEmbedding(config.head_dim) if config.pos == "rope" else None  # shared: it holds no parameters
        self.blocks = nn.ModuleList(Block(config, i, kernels, self._hooks, rope) for i in range(config.n_layer))
        self.ln_f = _norm(config, kernels)
        self.lm_head = Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_weights:
            self.lm_head.weight = self.wte.weight
        std = 0.02 / math.sqrt(2 * config.n_layer)  # GPT-2's init of the residual branches' output projections
        for block in self.blocks:
            nn.init.normal_(block.attn.proj.weight, std=std)
            if block.mlp is not None:
                nn.init.normal_(block.mlp.proj.weight, std=std)
        self._scale_initial_weights()

    def _scale_initial_weights(self) -> None:
        """Every weight matrix (a tied one once) times `init_scale`, after the draws; norms and biases unchanged."""
        with torch.no_grad():
            for param in self.parameters():  # each tensor once, however many modules share it
                if param.dim() >= 2:
                    param.mul_(self.config.init_scale)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def hook_names(self) -> list[str]:
        """The names `hooks` and `run_with_cache` accept, in the order the forward reaches them."""
        return hook_names(self.config.n_layer, self.wpe is not None, self.config.mlp)

    @contextmanager
    def hooks(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """Within the with-block, hand each named activation to its fn(activation, name) (see `gpt_core.hooks`); an
        unknown name is a ValueError, nothing set."""
        check_hooks(fns, self.hook_names())
        with self._hooks.added(fns):
            yield

    @property
    def hook_offset(self) -> int:
        """For a hook: the sequence index of the first of the T positions its activation holds."""
        return self._hooks.offset

    def run_with_cache(
        self, idx: Tensor, names: str | Iterable[str] | None = None, **forward_kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The logits and the named activations (all by default, or one name), detached, in forward order; in the
        caller's grad mode (wrap it in torch.no_grad() for the numbers alone)."""
        wanted = self.hook_names() if names is None else [names] if isinstance(names, str) else list(names)
        recorded: dict[str, Tensor] = {}

        def record(activation: Tensor, name: str) -> None:
            recorded[name] = activation.detach()

        with self.hooks(dict.fromkeys(wanted, record)):
            logits = self(idx, **forward_kwargs).logits
        return logits, recorded

    def new_cache(self, batch_size: int, max_length: int, positions: Tensor | None = None) -> KVCache:
        """An empty KV cache for `batch_size` sequences of up to `max_length` positions, holding `positions` (B,
        max_length) if given: a randomized model's ids, checked here once, which each cached forward then reads."""
        c, p = self.config, self.wte.weight
        cache = KVCache(c.n_layer, batch_size, c.n_head, c.head_dim, max_length, p.device, p.dtype, positions)
        pos.check_held_positions(c, cache)
        return cache

    @property
    def kernels(self) -> Kernels:
        """The set every layer was built with; another set is another model: GPT(config, set) and load_state_dict."""
        return self._kernels

    @kernels.setter
    def kernels(self, _: Kernels) -> None:
        raise AttributeError("a GPT's kernels are chosen when it is built: GPT(config, kernels), then load_state_dict")

    def sample_positions(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> Tensor:
        """Randomized position ids (B, T), sorted, distinct, from range(max_positions) (`gpt_core.positions`)."""
        return pos.sample_positions(self.config, batch_size, length, self.wte.weight.device, generator)

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy over the scored targets (those not equal to IGNORE_INDEX)."""
        return self.kernels.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))  # (N, V), (N,)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, cache: KVCache | None = None,
                positions: Tensor | None = None, read: Tensor | None = None) -> GPTOutput:  # fmt: skip
        """Token ids (B, T) -> logits (B, T, V) and, given targets, the loss over those not IGNORE_INDEX. With a
        `cache`, idx is just the new ones; positions (T,) or (B, T): their ids (default: the cache's, else the next T).
        `read` (B, T) bool, on idx's device or the CPU: the last MLP and the head run only where True: logits (N, V)."""
        B, T = idx.shape
        if read is not None:
            check_read(read, idx)
        positions = pos.forward_positions(self.config, B, T, positions, cache, self.training, self.wte.weight.device)
        if self._hooks:
            self._hooks.offset = cache.length if cache is not None else 0  # where this call's T positions start
        x = self.hook("embed", self.wte(idx))  # (B, T, C)
        if self.wpe is not None:
            x = x + self.hook("pos_embed", self.wpe.weight[positions])  # (T, C) broadcast over B, or (B, T, C)
        x = self.kernels.dropout(x, self.config.dropout, self.training)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, positions, read if i == len(self.blocks) - 1 else None)  # last: (N, C) with read
        if cache is not None:
            cache.advance(T)
        logits = self.hook("logits", self.lm_head(self.hook("ln_final", self.ln_f(x))))  # (B, T, V) or (N, V)
        scored = targets if targets is None or read is None else read_rows(targets, read)  # (N,)
        return GPTOutput(logits, None if scored is None else self.loss(logits, scored))
