"""Compare every hand-written piece with references the caller passes in (REFERENCE_SIGNATURES), on random inputs.

gpt-train passes PyTorch's built-ins, so this package never names them. In float64 a difference is absolute. In a
16-bit dtype the kernel runs on 16-bit inputs and the reference on the same values in float64 (its own 16-bit rounding
is not ours to answer for), and the difference is over max(1, max |reference|): rounding moves a value by a fraction of
itself, and below a scale of 1 a ~0 gradient is not held to a precision relative to itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call

from gpt_core.compiling import compiled
from gpt_core.kernels import DEFAULT_KERNELS, FAST_KERNELS, KERNEL_SLOTS, Kernels, _takes_dropout
from gpt_core.kernels.softmax import log_softmax
from gpt_core.model import GPT, Embedding, GPTConfig, Linear
from gpt_core.reference import IGNORE_INDEX

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
"""The references `verification_report` needs, by name, with the signature each must have (differentiable twice,
for `second_derivative_report`)."""

References = Mapping[str, Callable[..., Tensor]]


@dataclass(frozen=True)
class Row:
    """One comparison: the largest |difference| of outputs and of gradients, and where each is (or what failed)."""

    component: str
    reference: str
    forward: float
    grad: float | None
    forward_at: str = ""
    grad_at: str = ""
    relative: bool = False  # differences over max(1, the reference's largest |value|) (16-bit dtypes)
    refused: str = ""  # what the kernel raised instead of answering (second derivatives): loud, so not a failure

    def failure(self, tolerance: float) -> str | None:
        """One line saying which output differs, by how much and where, if this row exceeds `tolerance`."""
        for diff, where in ((self.forward, self.forward_at), (self.grad, self.grad_at)):
            if diff is not None and not diff <= tolerance:
                if math.isinf(diff):
                    return f"{self.component}: {where}"
                scale = " of the reference's scale" if self.relative else ""
                by = f"by {diff:.1e}{scale}, which exceeds the tolerance {tolerance:.0e}"
                return f"{self.component}: {where} differs from {self.reference} {by}"
        return None


@dataclass(frozen=True)
class _Case:
    component: str
    reference: str
    slot: str | None  # the Kernels slot it exercises; None for pieces that are not kernels
    names: tuple[str, ...]  # of the arguments, for saying whose gradient differs
    inputs: Callable[[torch.Generator, torch.dtype], Sequence[Any]]  # the arguments
    theirs: Callable[..., Tensor]  # the reference on the same arguments
    ours: Callable[..., Tensor] | None = None  # (kernels, *arguments); None: the slot's kernel on the arguments
    draws: bool = False  # whether it checks a random draw (dropout), by what holds for any draw

    def call(self, kernels: Kernels, *arguments: Any) -> Tensor:
        return self.ours(kernels, *arguments) if self.ours else getattr(kernels, self.slot)(*arguments)


def _randn(gen: torch.Generator, dtype: torch.dtype, *shape: int, scale: float = 1.0) -> Tensor:
    return (torch.randn(*shape, generator=gen, dtype=dtype, device="cpu") * scale).requires_grad_()


def _targets_with_ignored(gen: torch.Generator, n: int, vocab: int) -> Tensor:
    targets = torch.randint(vocab, (n,), generator=gen, device="cpu")
    targets[::3] = IGNORE_INDEX  # every third position unscored
    return targets


def end_aligned(sdpa: Callable[..., Tensor], q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """`sdpa` (its causal mask top-left aligned) with the queries the last Tq of the Tk positions, as in cached
    decoding: it runs on zeros in front of them."""
    n_missing = k.shape[-2] - q.shape[-2]
    if not causal or n_missing <= 0:
        return sdpa(q, k, v, causal)
    padded = torch.cat((q.new_zeros(*q.shape[:-2], n_missing, q.shape[-1]), q), dim=-2)
    return sdpa(padded, k, v, True)[..., n_missing:, :]


def _attention_cases(ref: References) -> list[_Case]:
    """Attention on shapes that catch mistakes (odd sizes, offset queries, several tiles), then its weights."""
    B, H, T, d = 2, 4, 7, 16
    b, h, t, dh = 1, 3, 133, 5  # the long cases'

    def shapes(b: int, h: int, tq: int, tk: int, dh: int, causal: bool, with_v: bool = True):
        def make(g, dt):
            q, k = _randn(g, dt, b, h, tq, dh), _randn(g, dt, b, h, tk, dh)
            return (q, k, _randn(g, dt, b, h, tk, dh), causal) if with_v else (q, k, causal)

        return make

    def identity(k: Tensor) -> Tensor:
        """v = I (B, H, Tk, Tk): attention's output is then its weights."""
        return torch.eye(k.shape[-2], dtype=k.dtype, device=k.device).expand(*k.shape[:-1], k.shape[-2])

    def weights(q: Tensor, k: Tensor, causal: bool) -> Tensor:
        return end_aligned(ref["sdpa"], q, k, identity(k), causal)

    def case(component: str, *shape: int, causal: bool) -> _Case:
        return _Case(component, "sdpa", "attention", ("q", "k", "v", "causal"), shapes(*shape, causal),
                     functools.partial(end_aligned, ref["sdpa"]))  # fmt: skip

    def weights_case(component: str, *shape: int, causal: bool) -> _Case:
        inputs = shapes(*shape, causal, with_v=False)
        return _Case(component, "sdpa", "attention_weights", ("q", "k", "causal"), inputs, weights)

    # Dropout of the attention weights draws inside the kernel. With v the identity (a head size of Tk, as the kernel
    # wants v shaped like k) the output is the weights themselves, each kept one scaled by 1/(1-p), each dropped one 0:
    # O (1-p) + P [O = 0], with P the same kernel's weights without dropout, is the reference's weights for any draw
    # (and its gradients with respect to q and k theirs only if the backward keeps the forward's mask and scale), and
    # the share of the 2^18 weights dropped is p. 80 positions: a tiled kernel's several tiles, the causal diagonal
    # across them and a last tile cut short. v's gradient: with v = [I V] (head size 2 Tk) one call's output is
    # [A, A V], A the dropped weights, so O[V] - O[I] V is 0 with zero gradients (q and k's only if the backward keeps
    # the forward's mask; V's, A^T G - A^T G, only if v's gradient does too).
    def reassembled(kernels, q: Tensor, k: Tensor, causal: bool) -> Tensor:
        dropped = kernels.attention(q, k, identity(k), causal, dropout_p=0.25)
        return dropped * 0.75 + kernels.attention(q, k, identity(k), causal) * (dropped == 0)

    def share_dropped(kernels, q: Tensor, k: Tensor, causal: bool) -> Tensor:
        dropped = kernels.attention(q, k, identity(k), causal, dropout_p=0.25)  # non-causal: every weight is above 0
        return ((dropped == 0).to(q.dtype).mean() * 100).round() / 100

    def many(g, dt):
        return [torch.randn(4, 16, 64, 64, generator=g, dtype=dt) for _ in "qk"] + [False]

    def values_inputs(g, dt):
        return [_randn(g, dt, 1, 2, 48, 96), _randn(g, dt, 1, 2, 48, 96), _randn(g, dt, 1, 2, 48, 48), True]

    def values_through(kernels, q: Tensor, k: Tensor, values: Tensor, causal: bool) -> Tensor:
        out = kernels.attention(q, k, torch.cat((identity(k), values), dim=-1), causal, dropout_p=0.25)  # [A, A V]
        dropped, through = out.split(k.shape[-2], dim=-1)
        return through - dropped @ values

    def nothing(q: Tensor, k: Tensor, values: Tensor, causal: bool) -> Tensor:
        return (q.sum() + k.sum()) * 0 + values * 0  # zeros, with zero gradients for q, k and V

    return [
        case("sdpa causal", B, H, T, T, d, causal=True),
        case("sdpa non-causal", B, H, T, T, d, causal=False),
        case("sdpa causal, queries offset by 4", B, H, T - 4, T, d, causal=True),
        case("sdpa causal, single query", B, H, 1, T, d, causal=True),
        case(f"sdpa causal, {t} positions, head size {dh}", b, h, t, t, dh, causal=True),
        case(f"sdpa non-causal, {t} positions, head size {dh}", b, h, t, t, dh, causal=False),
        case(f"sdpa causal, {t - 63} queries offset by 63", b, h, t - 63, t, dh, causal=True),
        weights_case("attention weights causal", B, H, T, T, d, causal=True),
        weights_case("attention weights non-causal", B, H, T, T, d, causal=False),
        weights_case("attention weights causal, queries offset by 4", B, H, T - 4, T, d, causal=True),
        weights_case("attention weights causal, single query", B, H, 1, T, d, causal=True),
        _Case("sdpa causal, dropout: O (1-p) + P [O = 0]", "sdpa", "attention", ("q", "k", "causal"),
              shapes(1, 2, 80, 80, 80, True, with_v=False), weights, reassembled, draws=True),  # tiles, a ragged end
        _Case("sdpa causal, dropout, v = [I V]: O[V] - O[I] V", "0", "attention", ("q", "k", "V", "causal"),
              values_inputs, nothing, values_through, draws=True),
        _Case("sdpa, dropout: share of weights dropped", "p = 0.25", "attention", ("q", "k", "causal"), many,
              lambda q, k, causal: torch.full((), 0.25, dtype=q.dtype), share_dropped, draws=True),
    ]  # fmt: skip


def _cases(ref: References, device: torch.device | str = "cpu") -> list[_Case]:
    B, T, C, V = 2, 7, 32, 11
    ids = torch.tensor([[0, 3, 7, 1], [10, 2, 2, 5]], device=device)
    norm = ("x", "weight", "bias", "eps")

    def linear_inputs(g, dt):
        return _randn(g, dt, B, T, C), _randn(g, dt, 3 * C, C), _randn(g, dt, 3 * C)

    def linear_ours(kernels, x, w, b):
        return functional_call(Linear(C, 3 * C), {"weight": w, "bias": b}, (x,))

    def embedding_ours(kernels, w):
        return functional_call(Embedding(V, C), {"weight": w}, (ids,))

    def norm_inputs(g, dt):
        return _randn(g, dt, B, T, C), _randn(g, dt, C), _randn(g, dt, C), 1e-5

    def norm_inputs_without_bias(g, dt):
        return _randn(g, dt, B, T, C), _randn(g, dt, C), None, 1e-5

    def layer_norm(x, w, b, eps):
        return ref["layer_norm"](x, w, b)  # its eps is 1e-5, the cases' own

    def ce_inputs(g, dt):
        return _randn(g, dt, B * T, V), _targets_with_ignored(g, B * T, V)

    def logits(scale: float):
        return lambda g, dt: (_randn(g, dt, B, T, V, scale=scale),)

    def activations(scale: float):
        return lambda g, dt: (_randn(g, dt, B, T, C, scale=scale),)

    # Dropout draws at random, so its training cases check what holds for any draw: the kept elements are x / (1-p)
    # and the dropped 0, so y (1-p) + x [y = 0] is x (its gradient is the cotangent only if the backward keeps the
    # forward's mask and scale), and the share dropped of 2^18 elements is p to two decimals (6 sigma).
    def reassembled(kernels, x):
        y = kernels.dropout(x, 0.25, True)
        return y * 0.75 + x * (y == 0)

    def share_dropped(kernels, x):
        return ((kernels.dropout(x, 0.25, True) == 0).to(x.dtype).mean() * 100).round() / 100

    def many(g, dt):
        return (torch.randn(2**18, generator=g, dtype=dt),)

    return [
        _Case("Linear", "linear", None, ("x", "weight", "bias"), linear_inputs, ref["linear"], linear_ours),
        _Case("Embedding", "embedding", None, ("weight",), lambda g, dt: (_randn(g, dt, V, C),),
              lambda w: ref["embedding"](ids, w), embedding_ours),
        _Case("LayerNorm", "layer_norm", "layer_norm", norm, norm_inputs, layer_norm),
        _Case("LayerNorm without bias", "layer_norm", "layer_norm", norm, norm_inputs_without_bias, layer_norm),
        _Case("GELU (tanh)", "gelu", "gelu", ("x",), activations(1.0), ref["gelu"]),
        _Case("GELU (tanh), inputs x 30", "gelu", "gelu", ("x",), activations(30.0), ref["gelu"]),
        _Case("softmax", "softmax", "sampling_softmax", ("x",), logits(1.0), ref["softmax"]),
        _Case("softmax, logits x 1000", "softmax", "sampling_softmax", ("x",), logits(1000.0), ref["softmax"]),
        _Case("log_softmax", "log_softmax", None, ("x",), logits(1.0), ref["log_softmax"],
              lambda kernels, x: log_softmax(x)),
        _Case("cross_entropy (ignore_index)", "cross_entropy", "cross_entropy", ("logits", "targets"), ce_inputs,
              ref["cross_entropy"]),
        _Case("dropout, evaluation", "x", "dropout", ("x",), activations(1.0), lambda x: x * 1,
              lambda kernels, x: kernels.dropout(x, 0.25, False)),
        _Case("dropout, training: y (1-p) + x [y = 0]", "x", "dropout", ("x",), activations(1.0), lambda x: x * 1,
              reassembled, draws=True),
        _Case("dropout, training: share of zeros", "p = 0.25", "dropout", ("x",), many,
              lambda x: torch.full((), 0.25, dtype=x.dtype), share_dropped, draws=True),
        *_attention_cases(ref),
    ]  # fmt: skip


def _heads(b: int, h: int, t: int, dh: int, n: int, causal: bool):
    """Inputs (n of q, k, v, then `causal`) laid out as MultiHeadAttention hands them over: heads of one qkv
    projection (B, T, 3, H, d), split and transposed to (B, H, T, d), strided."""

    def make(g, dt):
        qkv = torch.randn(b, t, 3, h, dh, generator=g, dtype=dt, device="cpu")
        return [x.transpose(1, 2).requires_grad_() for x in qkv.unbind(2)[:n]] + [causal]

    return make


def _kernel_cases(ref: References) -> list[_Case]:
    """The cases `kernel_report` runs on a chosen kernel beyond its slot's in verify's table. Inputs strided as a
    model hands them over (heads split from one qkv projection; an activation that is a slice of a wider tensor),
    which a kernel reading memory as if contiguous gets wrong; and logits holding -inf, as top-k sampling and
    static decoding's unfilled cache slots give `sampling_softmax`, which a softmax whose running max starts at
    -inf (an online one) turns into nan."""
    B, H, T, d, C = 2, 4, 7, 16, 32
    norm = ("x", "weight", "bias", "eps")

    def sliced(g, dt, *shape: int) -> Tensor:
        """(..., C) strided: the middle third of a (..., 3C) tensor, as k is of the qkv projection's output."""
        wide = torch.randn(*shape[:-1], 3 * shape[-1], generator=g, dtype=dt, device="cpu")
        return wide[..., shape[-1] : 2 * shape[-1]].requires_grad_()

    def attention(component: str, *shape: int, causal: bool) -> _Case:
        return _Case(component, "sdpa", "attention", ("q", "k", "v", "causal"), _heads(*shape, 3, causal),
                     functools.partial(end_aligned, ref["sdpa"]))  # fmt: skip

    def weights(q: Tensor, k: Tensor, causal: bool) -> Tensor:
        identity = torch.eye(k.shape[-2], dtype=k.dtype, device=k.device).expand(*k.shape[:-1], k.shape[-2])
        return ref["sdpa"](q, k, identity, causal)

    def masked(fill: Callable[[torch.Generator, Tensor], Tensor], *shape: int):
        def make(g, dt):
            x = torch.randn(*shape, generator=g, dtype=dt, device="cpu")
            return (fill(g, x).detach().requires_grad_(),)

        return make

    def top_k(g, x: Tensor) -> Tensor:  # as `generate` masks logits below the k-th best
        return x.masked_fill(x < x.topk(5, dim=-1).values[..., -1:], float("-inf"))

    def leading(g, x: Tensor) -> Tensor:  # a first block (every tile of a tiled kernel up to 4096) all -inf
        return torch.cat((torch.full_like(x[..., :4100], float("-inf")), x[..., 4100:]), dim=-1)

    def single(g, x: Tensor) -> Tensor:  # one finite entry per row: first, last, then anywhere
        at = torch.randint(x.shape[-1], (*x.shape[:-1], 1), generator=g, device="cpu")
        at.view(-1)[:2] = torch.tensor([0, x.shape[-1] - 1], device="cpu")
        return torch.full_like(x, float("-inf")).scatter(-1, at, x.gather(-1, at))

    softmax = ref["softmax"]
    return [
        _Case("LayerNorm, x strided (a slice of a wider tensor)", "layer_norm", "layer_norm", norm,
              lambda g, dt: (sliced(g, dt, B, T, C), _randn(g, dt, C), _randn(g, dt, C), 1e-5),
              lambda x, w, b, eps: ref["layer_norm"](x, w, b)),
        _Case("GELU (tanh), x strided (a slice of a wider tensor)", "gelu", "gelu", ("x",),
              lambda g, dt: (sliced(g, dt, B, T, 4 * C),), ref["gelu"]),
        _Case("softmax, -inf below each row's 5th best (top-k)", "softmax", "sampling_softmax", ("x",),
              masked(top_k, 2, 3, 1500), softmax),
        _Case("softmax, the first 4100 of 4160 -inf", "softmax", "sampling_softmax", ("x",),
              masked(leading, 2, 2, 4160), softmax),
        _Case("softmax, one finite entry per row", "softmax", "sampling_softmax", ("x",), masked(single, 2, 3, 1500),
              softmax),
        attention("sdpa causal, q, k, v strided (heads of one qkv tensor)", B, H, T, d, causal=True),
        attention("sdpa non-causal, 133 positions, head size 5, q, k, v strided", 1, 3, 133, 5, causal=False),
        _Case("attention weights causal, q, k strided (heads of one qkv tensor)", "sdpa", "attention_weights",
              ("q", "k", "causal"), _heads(B, H, T, d, 2, True), weights),
    ]  # fmt: skip


def slot_cases(slot: str, references: References, seed: int) -> list[tuple[str, str, tuple, Callable[..., Tensor]]]:
    """`slot`'s cases that call its kernel on their arguments, in float64 drawn from `seed`: (component, reference,
    the kernel's arguments, the reference on them)."""
    gen = torch.Generator().manual_seed(seed)
    return [(case.component, case.reference, tuple(case.inputs(gen, torch.float64)), case.theirs)
            for case in _cases(references) if case.slot == slot and case.ours is None]  # fmt: skip


def is_relative(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and torch.finfo(dtype).bits == 16


def difference(name: str, ours: Tensor | None, theirs: Tensor, relative: bool = False) -> Difference:
    """The largest |ours - theirs| in float64 and where it is, over max(1, max |theirs|) if `relative`. A missing
    tensor, a wrong shape or a non-finite value is an infinite difference: nan must fail, not compare false."""
    if ours is None:
        return math.inf, f"{name} is missing: the kernel gave no gradient"
    if not isinstance(ours, Tensor):
        return math.inf, f"{name} is a {type(ours).__name__}, not a tensor"
    if ours.shape != theirs.shape:
        return math.inf, f"{name} has shape {tuple(ours.shape)}, expected {tuple(theirs.shape)}"
    if ours.numel() == 0:
        return 0.0, name
    expected = theirs.detach().cpu().double()  # on the CPU: MPS has no float64
    diff = torch.nan_to_num((ours.detach().cpu().double() - expected).abs(), nan=math.inf, posinf=math.inf)
    scale = expected.abs().max()
    if relative and math.isfinite(scale):
        diff /= max(1.0, scale)
    largest = diff.argmax()  # on diff's device (the CPU), whatever the default device
    flat = int(largest)
    where = [int(i) for i in torch.unravel_index(largest, diff.shape)]
    value = diff.flatten()[flat].item()
    if math.isinf(value):
        got, expected = ours.detach().flatten()[flat].item(), theirs.flatten()[flat].item()
        return value, f"{name} {where} is {got}, expected {expected:.6g}"
    return value, f"{name} {where}"


Difference = tuple[float, str]  # the largest |difference| and where it is, or what went wrong (inf)


def _largest(differences: Sequence[Difference]) -> Difference:
    return max(differences, key=lambda pair: pair[0])


Pairs = Sequence[tuple[str, Tensor | None, Tensor]]  # (name, ours, theirs)


def compared(component: str, reference: str, outputs: Pairs, gradients: Pairs, relative: bool) -> Row:
    """The Row of the largest difference of `outputs` and of `gradients`."""
    forward = _largest([difference(*pair, relative) for pair in outputs])
    grad = _largest([difference(*pair, relative) for pair in gradients])
    return Row(component, reference, forward[0], grad[0], forward[1], grad[1], relative)


def _row(
    component: str, reference: str, dtype: torch.dtype, forward: Difference, grad: Difference | None = None
) -> Row:
    grad_value, grad_at = grad or (None, "")
    return Row(component, reference, forward[0], grad_value, forward[1], grad_at, is_relative(dtype))


def _leaf(x: Tensor, to: torch.device | str | torch.dtype) -> Tensor:
    """`x` moved to a device or a dtype, a leaf of its own there if `x` wants a gradient."""
    return x.detach().to(to).requires_grad_(x.requires_grad)


def _described(error: Exception) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def _raised(what: str, error: Exception) -> Difference:
    return math.inf, f"{what} raised {_described(error)}"


def _checks(kernels: Kernels, case: _Case) -> bool:
    """Whether `kernels` have what `case` checks: an attention kernel without `dropout_p` applies no dropout (and
    serves no model with dropout, `Kernels.check_dropout`)."""
    return not (case.draws and case.slot == "attention" and not _takes_dropout(kernels.attention))


def _changed(names: Sequence[str], arguments: Sequence[Any], given: Sequence[Any]) -> str | None:
    """The name of the first tensor argument whose values are no longer those `given` (a copy), or None. A kernel
    that writes into its input corrupts the model's activations wherever that input is read again."""
    for name, now, was in zip(names, arguments, given, strict=True):
        if isinstance(now, Tensor) and not torch.equal(now, was):
            if not now.is_floating_point() or not torch.equal(now.isnan(), was.isnan()):
                return name
            if not torch.equal(now.detach().nan_to_num(), was.nan_to_num()):  # nan where it was: unchanged
                return name
    return None


def _compare(case: _Case, kernels: Kernels, gen, dtype: torch.dtype, labels: Mapping[str, str] | None, device) -> Row:
    """One case's outputs and gradients; a kernel failing in any way is this row's result, not an error."""
    relative, label = is_relative(dtype), (labels or {}).get(case.reference, case.reference)
    inputs = [_leaf(x, device) if isinstance(x, Tensor) else x for x in case.inputs(gen, dtype)]
    leaves = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    reference_inputs = [_leaf(x, torch.float64) if relative and i in leaves else x for i, x in enumerate(inputs)]
    theirs = case.theirs(*reference_inputs)
    cotangent = torch.randn(theirs.shape, generator=gen, dtype=dtype, device="cpu").to(device)
    # the reference's gradients first: nothing the kernel does to the arguments it shares can reach them
    wrt = [reference_inputs[i] for i in leaves]
    grads_theirs = torch.autograd.grad(theirs, wrt, cotangent.to(theirs.dtype)) if leaves else ()
    given = [x.detach().clone() if isinstance(x, Tensor) else x for x in inputs]
    try:
        ours = case.call(kernels, *inputs)
    except Exception as error:
        return _row(case.component, label, dtype, _raised("the forward", error))
    if (name := _changed(case.names, inputs, given)) is not None:
        return _row(case.component, label, dtype, (math.inf, f"the forward changed its argument {name} in place"))
    forward = difference("output", ours, theirs, relative)
    if not isinstance(ours, Tensor) or ours.shape != theirs.shape or not leaves:  # not leaves: nothing to differentiate
        return _row(case.component, label, dtype, forward)
    try:
        grads_ours = torch.autograd.grad(ours, [inputs[i] for i in leaves], cotangent, allow_unused=True)
    except Exception as error:
        return _row(case.component, label, dtype, forward, _raised("the backward", error))
    if (name := _changed(case.names, inputs, given)) is not None:
        return _row(case.component, label, dtype, forward, (math.inf, f"the backward changed the argument {name}"))
    names = [f"gradient of {case.names[i]}" for i in leaves]
    gradients = list(zip(names, grads_ours, grads_theirs, strict=True))
    return compared(case.component, label, [("output", ours, theirs)], gradients, relative)


_SMALL_GPT = GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=16, pos="rope")


def kv_cache_row(gen: torch.Generator, dtype: torch.dtype, pos: str = "rope", randomized: bool = False,
                 kernels: Kernels = DEFAULT_KERNELS, device: torch.device | str = "cpu") -> Row:  # fmt: skip
    """Logits from token-by-token decoding with the KV cache vs one full forward."""
    shape = {"max_positions": 40, "randomized_positions": True} if randomized else {}
    with torch.device("cpu"):  # beside the inputs, whatever the default device
        model = GPT(dataclasses.replace(_SMALL_GPT, pos=pos, **shape), kernels).to(dtype).eval()
    idx = torch.randint(13, (2, 12), generator=gen, device="cpu")
    drawn = model.sample_positions(2, 12, gen) if randomized else None  # None: the cache's own offsets
    model, idx, drawn = model.to(device), idx.to(device), None if drawn is None else drawn.to(device)

    def ids(start: int, end: int) -> Tensor | None:
        return None if drawn is None else drawn[:, start:end]

    name = f"randomized {pos}" if randomized else pos
    component, reference = f"KV-cache decoding ({name} positions)", "full forward (gpt_core)"
    try:
        with torch.no_grad():
            full = model(idx, positions=ids(0, 12)).logits
            cache = model.new_cache(2, 12)
            steps = [model(idx[:, :5], cache=cache, positions=ids(0, 5)).logits]
            steps += [model(idx[:, t : t + 1], cache=cache, positions=ids(t, t + 1)).logits for t in range(5, 12)]
    except Exception as error:
        return _row(component, reference, dtype, _raised("decoding", error))
    return _row(component, reference, dtype, difference("logits", torch.cat(steps, 1), full, is_relative(dtype)))


def model_row(gen: torch.Generator, dtype: torch.dtype, kernels: Kernels, hook_pattern: bool = False,
              pos: str = "rope") -> Row:  # fmt: skip
    """A whole GPT computed with `kernels` vs the same weights with gpt-core's own (`pattern` hooked if asked), with
    position encoding `pos`: learned and none hand attention q and k strided (heads of the qkv projection), rope
    rotated copies."""
    config = dataclasses.replace(_SMALL_GPT, pos=pos)
    with torch.device("cpu"):  # beside the inputs, whatever the default device
        ours = GPT(config, kernels).to(dtype)
        theirs = GPT(config).to(dtype)
    theirs.load_state_dict(ours.state_dict())
    component = f"GPT forward and backward ({pos} positions)" + (", pattern hooked" if hook_pattern else "")
    hooked = [name for name in ours.hook_names() if name.endswith(".pattern")] if hook_pattern else []
    return _gpt_row(component, "GPT (gpt-core's kernels)", is_relative(dtype), ours, theirs, gen, hooked=hooked)


def device_model_row(gen: torch.Generator, dtype: torch.dtype, kernels: Kernels, device: torch.device | str) -> Row:
    """A whole GPT with `kernels` on `device` in `dtype` vs the same weights on the CPU in float64."""
    with torch.device("cpu"):
        theirs = GPT(_SMALL_GPT, kernels).double()
        ours = GPT(_SMALL_GPT, kernels).to(dtype)
    ours.load_state_dict(theirs.state_dict())
    component, reference = f"GPT forward and backward on {device}", "GPT on cpu (float64)"
    return _gpt_row(component, reference, dtype != torch.float64, ours, theirs, gen, device, prompt=4)


def _gpt_row(
    component, reference, relative: bool, ours: GPT, theirs: GPT, gen, device="cpu", prompt=0, hooked=()
) -> Row:
    """`ours` on `device` reading only the targets after `prompt` vs `theirs` on the CPU, on one batch."""
    idx = torch.randint(13, (2, 12), generator=gen, device="cpu")
    targets = torch.randint(13, (2, 12), generator=gen, device="cpu")
    targets[:, :prompt] = IGNORE_INDEX
    read = (targets != IGNORE_INDEX) if prompt else None
    expected = theirs(idx, targets)
    expected.loss.backward()
    try:
        ours.to(device)
        with ours.hooks(dict.fromkeys(hooked, lambda weights, name: None)):
            got = ours(idx.to(device), targets.to(device), read=None if read is None else read.to(device))
        got.loss.backward()
    except Exception as error:
        return Row(component, reference, math.inf, None, _raised("the model", error)[1], relative=relative)
    outputs = [("logits", got.logits.cpu(), expected.logits if read is None else expected.logits[read]),
               ("loss", got.loss.cpu(), expected.loss)]  # fmt: skip
    gradients = [(f"gradient of {name}", None if a.grad is None else a.grad.cpu(), b.grad)
                 for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True)]  # fmt: skip
    return compared(component, reference, outputs, gradients, relative)


@contextlib.contextmanager
def _inputs_from(seed: int | None) -> Iterator[torch.Generator]:
    """A generator for the inputs, seeded or fresh, and the global RNG forked and seeded from it."""
    gen = torch.Generator()
    gen.manual_seed(seed) if seed is not None else gen.seed()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(gen.initial_seed())
        yield gen


def verification_report(references: References, dtype: torch.dtype = torch.float64, seed: int | None = None,
                        labels: Mapping[str, str] | None = None, kernels: Kernels = FAST_KERNELS,
                        device: torch.device | str = "cpu") -> list[Row]:  # fmt: skip
    """One Row per comparison of `kernels` with `references`, on `device` (plus a whole GPT there vs the CPU)."""
    _check_references(references)
    with _inputs_from(seed) as gen:
        cases = [case for case in _cases(references, device) if _checks(kernels, case)]
        rows = [_compare(case, kernels, gen, dtype, labels, device) for case in cases]
        kv_cases = [(pos, False) for pos in ("learned", "rope", "none")] + [("learned", True), ("rope", True)]
        rows += [kv_cache_row(gen, dtype, pos, randomized, kernels, device) for pos, randomized in kv_cases]
        if torch.device(device).type != "cpu":
            rows.append(device_model_row(gen, dtype, kernels, device))
    return rows


def dropout_report(kernels: Kernels, references: References, device: torch.device | str = "cpu",
                   dtype: torch.dtype = torch.float32, seed: int | None = None,
                   labels: Mapping[str, str] | None = None, compile: bool = False) -> list[Row]:  # fmt: skip
    """The cases that check `kernels`' random draws (dropout alone and inside attention) on `device`: what a training
    step with dropout runs that no comparison with another set's step can reach, each set drawing its own masks.
    With `compile`, each case goes through `gpt_core.compiled` whole: what the compiler makes of the draws."""
    _check_references(references)
    with _inputs_from(seed) as gen:
        cases = [case for case in _cases(references, device) if case.draws and _checks(kernels, case)]
        if compile:
            # Each case's own function compiled, once, and reused by a later report: through the one frame
            # `_Case.call` every case would be a recompilation, and fullgraph makes hitting the limit an error.
            cases = [dataclasses.replace(case, component=f"compiled {case.component}",
                                         ours=compiled(case.ours, fullgraph=True)) for case in cases]  # fmt: skip
        return [_compare(case, kernels, gen, dtype, labels, device) for case in cases]


def kernel_report(slot: str, kernel: Callable[..., Tensor], references: References,
                  dtype: torch.dtype = torch.float64, seed: int | None = None,
                  labels: Mapping[str, str] | None = None) -> list[Row]:  # fmt: skip
    """Pin `kernel`, a replacement for `slot`, to the references on its cases (verify's, then its inputs strided as a
    model hands them over, or holding -inf as sampling does), then in a whole model with each position encoding."""
    if slot not in KERNEL_SLOTS:
        raise ValueError(f"unknown kernel slot {slot!r}; slots: {', '.join(KERNEL_SLOTS)}")
    _check_references(references)
    kernels = dataclasses.replace(DEFAULT_KERNELS, **{slot: kernel})
    with _inputs_from(seed) as gen:
        every = _cases(references) + _kernel_cases(references)
        cases = [case for case in every if case.slot == slot and _checks(kernels, case)]
        rows = [_compare(case, kernels, gen, dtype, labels, "cpu") for case in cases]
        if slot != "sampling_softmax":  # a training step never calls it: only generate samples from it
            hooked = slot == "attention_weights"
            rows += [model_row(gen, dtype, kernels, hooked, pos) for pos in ("learned", "rope", "none")]
        if slot == "attention":
            rows += [kv_cache_row(gen, dtype, pos, kernels=kernels) for pos in ("learned", "rope", "none")]
    return rows


SECOND_DERIVATIVE_CASES = {
    "layer_norm": ("LayerNorm",),
    "gelu": ("GELU (tanh)",),
    "sampling_softmax": ("softmax",),
    "cross_entropy": ("cross_entropy (ignore_index)",),
    "dropout": ("dropout, training: y (1-p) + x [y = 0]",),  # x for any draw: d<grad, u>/dcotangent is u
    "attention": ("sdpa causal", "sdpa non-causal, 133 positions, head size 5"),  # one tile, then several
    "attention_weights": ("attention weights causal",),
}
"""The cases `second_derivative_report` runs for each slot, by component."""


def second_derivative_report(references: References, kernels: Kernels = FAST_KERNELS, seed: int | None = None,
                             labels: Mapping[str, str] | None = None, slots: Sequence[str] = KERNEL_SLOTS,
                             device: torch.device | str = "cpu",
                             dtype: torch.dtype = torch.float64) -> list[Row]:  # fmt: skip
    """A second derivative through each of `slots`' kernels in `kernels` against the references' (which must be
    differentiable twice), on SECOND_DERIVATIVE_CASES: the gradient of <gradient, u> (create_graph=True), u random,
    with respect to the inputs and the cotangent. A kernel whose backward raises when asked to record a graph (one
    that differentiates once) is a row saying so, a refusal; one that answers must answer right, as a
    Hessian-vector product through a model would use it."""
    _check_references(references)
    unknown = [slots] if isinstance(slots, str) else [slot for slot in slots if slot not in KERNEL_SLOTS]
    if unknown:
        raise ValueError(
            f"unknown kernel slots {unknown}, or not a sequence of slots; slots: {', '.join(KERNEL_SLOTS)}"
        )
    chosen = {name for slot in slots for name in SECOND_DERIVATIVE_CASES[slot]}
    with _inputs_from(seed) as gen:
        cases = [case for case in _cases(references, device) if case.component in chosen]  # verify's order
        return [_second_derivative(case, kernels, gen, dtype, labels, device) for case in cases]


def _second_derivative(case: _Case, kernels: Kernels, gen, dtype: torch.dtype, labels, device) -> Row:
    label = (labels or {}).get(case.reference, case.reference)
    inputs = [_leaf(x, device) if isinstance(x, Tensor) else x for x in case.inputs(gen, dtype)]
    reference_inputs = [_leaf(x, device) if isinstance(x, Tensor) else x for x in inputs]  # a graph of their own
    held = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]  # the differentiated
    leaves, reference_leaves = [inputs[i] for i in held], [reference_inputs[i] for i in held]
    theirs = case.theirs(*reference_inputs)
    cotangent = torch.randn(theirs.shape, generator=gen, dtype=dtype, device="cpu").to(device).requires_grad_()
    directions = [torch.randn(x.shape, generator=gen, dtype=dtype, device="cpu").to(device) for x in leaves]
    try:
        expected = _gradient_of_gradient(theirs, reference_leaves, cotangent, directions)
    except RuntimeError as error:
        raise ValueError(f"second_derivative_report needs {label} differentiable twice: {_described(error)}") from None
    try:
        ours = case.call(kernels, *inputs)
    except Exception as error:
        return _row(case.component, label, dtype, _raised("the forward", error))
    forward = difference("output", ours, theirs)
    if math.isinf(forward[0]):  # not a tensor, the wrong shape, nan
        return _row(case.component, label, dtype, forward)
    try:  # the first derivative must come: only recording its graph may be refused
        torch.autograd.grad(ours, leaves, cotangent.detach(), retain_graph=True, allow_unused=True)
    except Exception as error:
        return _row(case.component, label, dtype, _raised("the backward", error))
    try:
        got = _gradient_of_gradient(ours, leaves, cotangent, directions)
    except Exception as error:
        return Row(case.component, label, 0.0, None, refused=_described(error))
    names = [f"d<grad, u>/d{case.names[i]}" for i in held] + ["d<grad, u>/dcotangent"]
    pairs = zip(names, got, expected, strict=True)
    return _row(case.component, label, dtype, _largest([difference(*pair) for pair in pairs]))


def _gradient_of_gradient(output: Tensor, leaves: Sequence[Tensor], cotangent: Tensor, directions) -> list[Tensor]:
    """d<g, u>/d(leaves, cotangent), g the gradient of <output, cotangent> with respect to `leaves`: the zeros where
    the gradient records no graph, the nothing a model's Hessian-vector product then silently gets from it."""
    grads = torch.autograd.grad(output, leaves, cotangent, create_graph=True, allow_unused=True)
    terms = [(g * u).sum() for g, u in zip(grads, directions, strict=True) if g is not None and g.requires_grad]
    wrt = [*leaves, cotangent]
    found = torch.autograd.grad(sum(terms), wrt, allow_unused=True) if terms else [None] * len(wrt)
    return [torch.zeros_like(x) if d is None else d for d, x in zip(found, wrt, strict=True)]


def _check_references(references: References) -> None:
    missing = sorted(set(REFERENCE_SIGNATURES) - set(references))
    if missing:
        raise ValueError(f"verification_report needs references for: {', '.join(missing)}")


def format_report(rows: Sequence[Row], first: str = "fwd", grad: bool = True) -> str:
    """A plain-text table: component, reference, max |diff| forward (or `first`) and, with `grad`, gradient
    (relative in a 16-bit report)."""
    diff = "max |diff|/max(1,|ref|)" if any(r.relative for r in rows) else "max |diff|"
    header = ("component", "reference", f"{diff} {first}", f"{diff} grad")[: 4 if grad else 3]
    body = [(r.component, r.reference, "refuses" if r.refused else f"{r.forward:.1e}",
             "-" if r.grad is None else f"{r.grad:.1e}")[: len(header)] for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
