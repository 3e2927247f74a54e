"""Compare every hand-written piece with a reference implementation, on fresh random inputs.

The references are passed in by the caller, one callable per piece with the hand-written
piece's own signature (see REFERENCE_SIGNATURES). gpt-train passes PyTorch's built-ins; this
package never names them, so its source stays hand-written from end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.func import functional_call

from gpt_core.attention import sdpa
from gpt_core.functional import IGNORE_INDEX, cross_entropy, gelu, layer_norm, log_softmax, softmax
from gpt_core.layers import Embedding, Linear
from gpt_core.model import GPT, GPTConfig

REFERENCE_SIGNATURES = {
    "linear": "(x, weight, bias) -> x @ weight.T + bias",
    "embedding": "(ids, weight) -> weight[ids]",
    "layer_norm": "(x, weight, bias) -> normalised over the last dim, eps 1e-5",
    "gelu": "(x) -> GELU, tanh approximation",
    "softmax": "(x) -> softmax over the last dim",
    "log_softmax": "(x) -> log-softmax over the last dim",
    "cross_entropy": "(logits (N, V), targets (N,)) -> mean loss, targets equal to IGNORE_INDEX unscored",
    "sdpa": "(q, k, v, causal) -> attention output; causal masks keys after each query, top-left aligned",
}
"""The references `verification_report` needs, by name, with the signature each must have."""

References = Mapping[str, Callable[..., Tensor]]


@dataclass(frozen=True)
class Row:
    component: str
    reference: str
    forward: float
    grad: float | None


@dataclass(frozen=True)
class _Case:
    component: str
    reference: str
    inputs: Callable[[torch.Generator, torch.dtype], Sequence[Tensor]]
    ours: Callable[..., Tensor]
    theirs: Callable[..., Tensor]


def _randn(gen: torch.Generator, dtype: torch.dtype, *shape: int) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_()


def _targets_with_ignored(gen: torch.Generator, n: int, vocab: int) -> Tensor:
    targets = torch.randint(vocab, (n,), generator=gen)
    targets[::3] = IGNORE_INDEX  # every third position unscored
    return targets


def _cases(ref: References) -> list[_Case]:
    """The comparisons, as (inputs, ours, theirs). Shapes follow the seed: (B, H, T, d) = (2, 4, 7, 16)."""
    B, H, T, d, C, V = 2, 4, 7, 16, 32, 11
    ids = torch.tensor([[0, 3, 7, 1], [10, 2, 2, 5]])

    def linear_inputs(g, dt):
        return _randn(g, dt, B, T, C), _randn(g, dt, 3 * C, C), _randn(g, dt, 3 * C)

    def linear_ours(x, w, b):
        return functional_call(Linear(C, 3 * C), {"weight": w, "bias": b}, (x,))

    def embedding_ours(w):
        return functional_call(Embedding(V, C), {"weight": w}, (ids,))

    def attention_inputs(tq):
        def make(g, dt):
            return _randn(g, dt, B, H, tq, d), _randn(g, dt, B, H, T, d), _randn(g, dt, B, H, T, d)

        return make

    def ce_inputs(g, dt):
        return _randn(g, dt, B * T, V), _targets_with_ignored(g, B * T, V)

    def logits(g, dt):
        return (_randn(g, dt, B, T, V),)

    return [
        _Case("Linear", "linear", linear_inputs, linear_ours, ref["linear"]),
        _Case("Embedding", "embedding", lambda g, dt: (_randn(g, dt, V, C),), embedding_ours,
              lambda w: ref["embedding"](ids, w)),
        _Case("LayerNorm", "layer_norm", lambda g, dt: (_randn(g, dt, B, T, C), _randn(g, dt, C), _randn(g, dt, C)),
              layer_norm, ref["layer_norm"]),
        _Case("GELU (tanh)", "gelu", lambda g, dt: (_randn(g, dt, B, T, C),), gelu, ref["gelu"]),
        _Case("softmax", "softmax", logits, softmax, ref["softmax"]),
        _Case("log_softmax", "log_softmax", logits, log_softmax, ref["log_softmax"]),
        _Case("cross_entropy (ignore_index)", "cross_entropy", ce_inputs, cross_entropy, ref["cross_entropy"]),
        _Case("sdpa causal", "sdpa", attention_inputs(T), lambda q, k, v: sdpa(q, k, v, causal=True)[0],
              lambda q, k, v: ref["sdpa"](q, k, v, True)),
        _Case("sdpa non-causal", "sdpa", attention_inputs(T), lambda q, k, v: sdpa(q, k, v, causal=False)[0],
              lambda q, k, v: ref["sdpa"](q, k, v, False)),
        _Case("sdpa causal, queries offset by 4", "sdpa", attention_inputs(T - 4),
              lambda q, k, v: sdpa(q, k, v, causal=True)[0], lambda q, k, v: _suffix_attention(ref, q, k, v)),
    ]  # fmt: skip


def _suffix_attention(ref: References, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The reference's answer for queries that are the last Tq positions: run it on a full-length
    query block (zeros in front) with its own top-left causal mask and keep the last Tq rows."""
    n_missing = k.shape[-2] - q.shape[-2]
    padded = torch.cat((q.new_zeros(*q.shape[:-2], n_missing, q.shape[-1]), q), dim=-2)
    return ref["sdpa"](padded, k, v, True)[..., n_missing:, :]


def _max_diff(a: Tensor, b: Tensor) -> float:
    return (a.detach() - b.detach()).abs().max().item()


def _compare(case: _Case, gen: torch.Generator, dtype: torch.dtype, label: str) -> Row:
    inputs = case.inputs(gen, dtype)
    ours, theirs = case.ours(*inputs), case.theirs(*inputs)
    forward = _max_diff(ours, theirs)
    leaves = [x for x in inputs if x.requires_grad]
    cotangent = torch.randn(ours.shape, generator=gen, dtype=dtype)
    grads_ours = torch.autograd.grad(ours, leaves, cotangent)
    grads_theirs = torch.autograd.grad(theirs, leaves, cotangent)
    grad = max(_max_diff(a, b) for a, b in zip(grads_ours, grads_theirs, strict=True))
    return Row(case.component, label, forward, grad)


def kv_cache_row(gen: torch.Generator, dtype: torch.dtype, pos: str = "rope", randomized: bool = False) -> Row:
    """Logits from token-by-token decoding with the KV cache vs one full forward of the prefix; a
    randomized model's sorted random position ids (Ruoss et al. 2023) are drawn once and used by both."""
    shape = {"max_positions": 40, "randomized_positions": True} if randomized else {}
    config = GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=16, pos=pos, **shape)
    model = GPT(config).to(dtype).eval()
    idx = torch.randint(13, (2, 12), generator=gen)
    drawn = model.sample_positions(2, 12, gen) if randomized else None  # None: the cache's own offsets

    def ids(start: int, end: int) -> Tensor | None:
        return None if drawn is None else drawn[:, start:end]

    with torch.no_grad():
        full = model(idx, positions=ids(0, 12)).logits
        cache = model.new_cache(2, 12)
        steps = [model(idx[:, :5], cache=cache, positions=ids(0, 5)).logits]
        steps += [model(idx[:, t : t + 1], cache=cache, positions=ids(t, t + 1)).logits for t in range(5, 12)]
    name = f"randomized {pos}" if randomized else pos
    return Row(
        f"KV-cache decoding ({name} positions)", "full forward (gpt_core)", _max_diff(torch.cat(steps, 1), full), None
    )


def verification_report(
    references: References,
    dtype: torch.dtype = torch.float64,
    seed: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[Row]:
    """Run every comparison on fresh random inputs and return one Row per component.

    `references` maps each name of REFERENCE_SIGNATURES to the implementation to compare with
    (gpt-train's are PyTorch's built-ins); `labels` optionally names them for the table.
    `seed` fixes the inputs; by default they are fresh.
    """
    missing = sorted(set(REFERENCE_SIGNATURES) - set(references))
    if missing:
        raise ValueError(f"verification_report needs references for: {', '.join(missing)}")
    gen = torch.Generator()
    gen.manual_seed(seed) if seed is not None else gen.seed()
    # The models built here draw their initial weights from the global RNG: fork it, so a seeded
    # report is fully reproducible and no report disturbs the caller's random stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(gen.initial_seed())
        rows = [
            _compare(case, gen, dtype, (labels or {}).get(case.reference, case.reference))
            for case in _cases(references)
        ]
        rows += [kv_cache_row(gen, dtype, pos) for pos in ("learned", "rope", "none")]
        rows += [kv_cache_row(gen, dtype, pos, randomized=True) for pos in ("learned", "rope")]
    return rows


def format_report(rows: Sequence[Row]) -> str:
    """A plain-text table: component, reference, max |diff| forward, max |diff| grad."""
    header = ("component", "reference", "max |diff| fwd", "max |diff| grad")
    body = [(r.component, r.reference, f"{r.forward:.1e}", "-" if r.grad is None else f"{r.grad:.1e}") for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
