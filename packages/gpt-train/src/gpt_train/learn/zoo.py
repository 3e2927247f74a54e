"""The classic mistakes of each step, each written out as the function that makes it.

A failing kernel is run on the same inputs as every mistake of its step (`cases`); the first mistake it
agrees with is named (raising on the same cases counts as agreeing there: a gradient of the wrong shape). A forward
mistake is matched on the outputs alone (what is wrong is already in the forward); a backward mistake, whose
forward is right, on the outputs and every gradient. A mistake that many different kernels make (an overflow, a
mistyped constant) is recognised by what its results show (`matches`) instead; its kernels are examples of it.

One short function per mistake: the module's length is the list of mistakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from gpt_core import IGNORE_INDEX
from gpt_train.learn.cases import Case, Outcome, close

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715

Matcher = Callable[[list[Case], list[Outcome], list[Outcome]], bool]
"""(cases, the kernel's outcomes, the right outcomes) -> whether the kernel makes the mistake."""


@dataclass(frozen=True)
class Mistake:
    """A named mistake: what to tell the learner, and one or more kernels that make it."""

    key: str
    message: str
    kernels: tuple[Callable[..., Tensor], ...]
    backward: bool = False  # matched on the gradients too
    tiled: bool = False  # its kernels take the learner's tile size, `tile=`
    matches: Matcher | None = None  # how it is recognised, when not by agreeing with one of its kernels


def _overflows(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> bool:
    """Right wherever its output is finite, and inf or nan on some case where the right output is finite: a
    formula that is exact on paper and overflows on large inputs."""
    overflowed = False
    for got, want in zip(outcomes, expected, strict=True):
        if got.error is not None or got.output is None or got.output.shape != want.output.shape:
            return False
        if bool(got.output.isfinite().all()):
            if not close(got.output, want.output):
                return False
        elif bool(want.output.isfinite().all()):
            overflowed = True
    return overflowed


# softmax -------------------------------------------------------------------------------------
def _softmax_without_max(x: Tensor) -> Tensor:
    return x.exp() / x.exp().sum(dim=-1, keepdim=True)


def _softmax_over(dim: int) -> Callable[[Tensor], Tensor]:
    def softmax(x: Tensor) -> Tensor:
        exp = (x - x.amax(dim=dim, keepdim=True)).exp()
        return exp / exp.sum(dim=dim, keepdim=True)

    return softmax


def _unnormalised_softmax(x: Tensor) -> Tensor:
    return (x - x.amax(dim=-1, keepdim=True)).exp()


def _log_softmax(x: Tensor) -> Tensor:
    shifted = x - x.amax(dim=-1, keepdim=True)
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


SOFTMAX = (
    Mistake("no_max_shift", "softmax without subtracting the max overflows on large logits: exp(1000) is inf",
            (_softmax_without_max,), matches=_overflows),
    Mistake("wrong_axis", "softmax over the wrong axis: each row of the last dim must sum to 1",
            (_softmax_over(0), _softmax_over(1))),
    Mistake("not_normalised", "exp(x - max) is never divided by its sum: the weights must sum to 1",
            (_unnormalised_softmax,)),
    Mistake("log_softmax", "this is log-softmax: the slot wants the probabilities themselves", (_log_softmax,)),
)  # fmt: skip


# attention -----------------------------------------------------------------------------------
def _attention(
    scale_power: float = 0.5,
    diagonal: int = 0,
    end_aligned: bool = True,
    masked: str = "causal",  # "causal", "never", "always"
    fill: float = float("-inf"),
    after_softmax: bool = False,
    softmax_dim: int = -1,
    scale_after_softmax: bool = False,
) -> Callable[..., Tensor]:
    """Attention with one thing done wrong: the scale d^-scale_power (or applied to the weights after the softmax),
    the mask's diagonal and alignment, when it masks, what it fills, whether it masks the weights after the
    softmax, and the softmax's axis."""

    def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        scale = q.shape[-1] ** scale_power
        scores = q @ k.transpose(-2, -1) / (1.0 if scale_after_softmax else scale)  # (B, H, Tq, Tk)
        n_queries, n_keys = scores.shape[-2:]
        offset = n_keys - n_queries if end_aligned else 0
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device).tril(offset + diagonal)
        mask = masked == "always" or (masked == "causal" and causal)
        if mask and not after_softmax:
            scores = scores.masked_fill(~allowed, fill)
        weights = _softmax_over(softmax_dim)(scores)
        if mask and after_softmax:
            weights = weights * allowed
        if scale_after_softmax:
            weights = weights / scale
        return weights @ v

    return attention


ATTENTION = (
    Mistake("scale_d", "your scores are divided by d, not sqrt(d)", (_attention(scale_power=1.0),)),
    Mistake("no_scale", "your scores are not scaled: divide q k^T by sqrt(d)", (_attention(scale_power=0.0),)),
    Mistake("no_mask", "no mask: queries see the future", (_attention(masked="never"),)),
    Mistake("mask_shifted", "position i sees position i+1: the mask is shifted by one", (_attention(diagonal=1),)),
    Mistake("mask_hides_self", "position i does not see itself: the mask must keep the diagonal",
            (_attention(diagonal=-1),)),
    Mistake("mask_top_left", "the mask is aligned to the start of the keys: with Tq < Tk (cached decoding) query i "
            "sits at position Tk - Tq + i", (_attention(end_aligned=False),)),
    Mistake("mask_without_causal", "causal=False still masks: only causal attention hides the future",
            (_attention(masked="always"),)),
    Mistake("mask_fills_zero", "masked scores are set to 0, not -inf: exp(0) = 1 still weights the future",
            (_attention(fill=0.0),)),
    Mistake("mask_after_softmax", "the mask is applied after the softmax: the weights left no longer sum to 1",
            (_attention(after_softmax=True),)),
    Mistake("softmax_over_queries", "softmax over the wrong axis: each query's weights over the keys (the last "
            "dim) must sum to 1", (_attention(softmax_dim=-2),)),
    Mistake("scale_after_softmax", "the scale is applied after the softmax: divide the scores q k^T by sqrt(d) "
            "before it, so that it shapes the weights", (_attention(scale_after_softmax=True),)),
)  # fmt: skip


# layer_norm ----------------------------------------------------------------------------------
def _layer_norm(
    ddof: int = 0,
    eps_inside: bool = True,
    use_eps: bool = True,
    root: bool = True,
    use_bias: bool = True,
    dims: tuple[int, ...] | None = (-1,),  # None: every dimension
) -> Callable[..., Tensor]:
    def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        over = tuple(range(x.dim())) if dims is None else dims
        centred = x - x.mean(dim=over, keepdim=True)
        count = math.prod(x.shape[d] for d in over)
        var = centred.square().sum(dim=over, keepdim=True) / (count - ddof)
        eps = eps if use_eps else 0.0
        if not root:
            spread = var + eps
        else:
            spread = (var + eps).sqrt() if eps_inside else var.sqrt() + eps
        y = centred / spread * weight
        return y + bias if bias is not None and use_bias else y

    return layer_norm


LAYER_NORM = (
    Mistake("eps_outside", "epsilon outside the square root: divide by sqrt(var + eps)",
            (_layer_norm(eps_inside=False),)),
    Mistake("unbiased", "unbiased variance: LayerNorm divides by C, not C-1", (_layer_norm(ddof=1),)),
    Mistake("no_eps", "epsilon is missing: divide by sqrt(var + eps)", (_layer_norm(use_eps=False),)),
    Mistake("no_root", "divided by the variance, not its square root", (_layer_norm(root=False),)),
    Mistake("no_bias", "the bias is never added", (_layer_norm(use_bias=False),)),
    Mistake("wrong_axis", "LayerNorm over the wrong axis: normalise each position's features, the last dimension "
            "(dim=-1, keepdim=True)", (_layer_norm(dims=(0,)), _layer_norm(dims=(1,)), _layer_norm(dims=None),
                                        _layer_norm(dims=(-2, -1)))),
)  # fmt: skip


# gelu ----------------------------------------------------------------------------------------
def _gelu_tanh_form(c: float = _GELU_C, a: float = _GELU_A, half: float = 0.5) -> Callable[[Tensor], Tensor]:
    return lambda x: half * x * (1.0 + torch.tanh(c * (x + a * x**3)))


def _gelu_erf(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _gelu_sigmoid(x: Tensor) -> Tensor:
    return x * torch.sigmoid(1.702 * x)


def _gelu_tanh_by_exp(x: Tensor) -> Tensor:
    e = (2.0 * _GELU_C * (x + _GELU_A * x**3)).exp()
    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))


def _gelu_tanh_by_exp_pair(x: Tensor) -> Tensor:
    """tanh(u) = (e^u - e^-u) / (e^u + e^-u): exact, and inf / inf once |u| > 710."""
    u = _GELU_C * (x + _GELU_A * x**3)
    return 0.5 * x * (1.0 + (u.exp() - (-u).exp()) / (u.exp() + (-u).exp()))


def _gelu_constants(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> tuple[float, float] | None:
    """The constants (c, a) of 0.5 x (1 + tanh(c (x + a x^3))) that the kernel's output on the first case fits,
    by least squares on atanh(2 y / x - 1) = c x + c a x^3 where tanh is far from saturating; None when the output
    is not of that form."""
    if outcomes[0].error is not None or outcomes[0].output is None:
        return None
    x, y = cases[0].args[0].detach(), outcomes[0].output.detach().double()
    if y.shape != x.shape:
        return None
    t = 2.0 * y / x - 1.0
    usable = (x.abs() > 0.1) & (t.abs() < 0.9)
    if int(usable.sum()) < 8:
        return None
    x, u = x[usable], torch.atanh(t[usable])
    design = torch.stack((x, x**3), dim=-1)
    fitted = torch.linalg.lstsq(design, u[:, None]).solution[:, 0]
    if not bool(((design @ fitted - u).abs() <= 1e-9 * (1.0 + u.abs())).all()):
        return None
    c, ca = float(fitted[0]), float(fitted[1])
    return c, ca / c


def _gelu_constant_mistyped(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> bool:
    """The tanh form with sqrt(2/pi) or 0.044715 near the right value but not it (a rounded or mistyped digit)."""
    fitted = _gelu_constants(cases, outcomes, expected)
    if fitted is None:
        return False
    c, a = fitted
    near = 0.5 < c / _GELU_C < 2.0 and 0.05 < a / _GELU_A < 20.0
    exact = math.isclose(c, _GELU_C, rel_tol=1e-12) and math.isclose(a, _GELU_A, rel_tol=1e-12)
    return near and not exact


GELU = (
    Mistake("erf", "erf GELU, the slot is the tanh approximation", (_gelu_erf,)),
    Mistake("sigmoid", "x sigmoid(1.702 x) is another approximation; the slot is the tanh one", (_gelu_sigmoid,)),
    Mistake("no_cubic", "the cubic term 0.044715 x^3 inside the tanh is missing", (_gelu_tanh_form(a=0.0),)),
    Mistake("sqrt_2pi", "the constant is sqrt(2/pi), not sqrt(2 pi)", (_gelu_tanh_form(c=math.sqrt(2 * math.pi)),)),
    Mistake("no_half", "the factor 0.5 is missing", (_gelu_tanh_form(half=1.0),)),
    Mistake("tanh_by_exp", "tanh written with exp overflows on large inputs (inf / inf): use torch.tanh",
            (_gelu_tanh_by_exp, _gelu_tanh_by_exp_pair), matches=_overflows),
    Mistake("constant_mistyped", "a constant is mistyped or rounded: sqrt(2/pi) = 0.7978845608028654 (write "
            "math.sqrt(2 / math.pi)) and 0.044715 exactly",
            (_gelu_tanh_form(c=0.7978), _gelu_tanh_form(a=0.04715), _gelu_tanh_form(c=0.79788456)),
            matches=_gelu_constant_mistyped),
)  # fmt: skip


# cross_entropy -------------------------------------------------------------------------------
def _per_row_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """logsumexp - the target's logit, each row (N,); a row whose target is -100 picks no logit."""
    onehot = targets.unsqueeze(-1) == torch.arange(logits.shape[-1], device=logits.device)  # (N, V); all False for -100
    row_max = logits.amax(dim=-1, keepdim=True)
    lse = (logits - row_max).exp().sum(dim=-1).log() + row_max.squeeze(-1)
    return lse - (logits * onehot).sum(dim=-1)


def _scored_rows_over(denominator: str, sign: float = 1.0) -> Callable[[Tensor, Tensor], Tensor]:
    def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
        scored = targets != IGNORE_INDEX
        total = sign * (_per_row_loss(logits, targets) * scored).sum()
        return {"all": total / len(targets), "none": total, "scored": total / scored.sum()}[denominator]

    return cross_entropy


def _clamped_to_class_0(denominator: str) -> Callable[[Tensor, Tensor], Tensor]:
    """-100 turned into class 0 (targets.clamp(min=0), so that gather does not fail) and scored as class 0."""

    def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
        losses = _per_row_loss(logits, targets.clamp(min=0))
        count = len(targets) if denominator == "all" else (targets != IGNORE_INDEX).sum()
        return losses.sum() / count

    return cross_entropy


def _cross_entropy_without_max(per_row: str) -> Callable[[Tensor, Tensor], Tensor]:
    """log(sum(exp(logits))) with no max subtracted ("logsumexp"), or -log of exp(logit) / sum exp ("probability")."""

    def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
        scored = targets != IGNORE_INDEX
        logits, targets = logits[scored], targets[scored]
        picked = logits.gather(-1, targets[:, None]).squeeze(-1)
        total = logits.exp().sum(dim=-1)
        losses = total.log() - picked if per_row == "logsumexp" else -(picked.exp() / total).log()
        return losses.mean()

    return cross_entropy


CROSS_ENTROPY = (
    Mistake("ignored_scored", "targets equal to -100 were scored: leave those rows out of the loss and the mean",
            (lambda logits, targets: _per_row_loss(logits, targets).mean(),)),
    Mistake("mean_over_all", "the mean is over all N rows; divide by the number of scored targets (not -100)",
            (_scored_rows_over("all"),)),
    Mistake("summed", "the loss is summed; it is the mean over the scored targets", (_scored_rows_over("none"),)),
    Mistake("sign", "the sign is flipped: the loss is minus the log-probability of the target",
            (_scored_rows_over("scored", sign=-1.0),)),
    Mistake("ignored_clamped", "targets of -100 were clamped to class 0 and scored: leave those rows out of the "
            "loss and out of the count", (_clamped_to_class_0("all"), _clamped_to_class_0("scored"))),
    Mistake("no_max_shift", "no max shift: log(sum(exp(logits))) overflows on large logits (exp(1000) is inf); "
            "subtract each row's max m first: m + log(sum(exp(logits - m)))",
            (_cross_entropy_without_max("logsumexp"), _cross_entropy_without_max("probability")),
            matches=_overflows),
)  # fmt: skip


# layer_norm_backward -------------------------------------------------------------------------
def _layer_norm_backward(mean_term: bool = True, variance_term: bool = True, g_has_weight: bool = True,
                         dweight_has_xhat: bool = True) -> Callable[..., Tensor]:  # fmt: skip
    """A correct LayerNorm forward with a hand-written backward missing one piece of
    dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy weight, or of dweight = sum(dy xhat)."""

    class LayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, eps):
            centred = x - x.mean(dim=-1, keepdim=True)
            rstd = (centred.square().mean(dim=-1, keepdim=True) + eps).rsqrt()
            xhat = centred * rstd
            ctx.save_for_backward(xhat, rstd, weight)
            ctx.has_bias = bias is not None
            y = xhat * weight
            return y + bias if bias is not None else y

        @staticmethod
        def backward(ctx, dy):
            xhat, rstd, weight = ctx.saved_tensors
            g = dy * weight if g_has_weight else dy
            dx = g
            if mean_term:
                dx = dx - g.mean(dim=-1, keepdim=True)
            if variance_term:
                dx = dx - xhat * (g * xhat).mean(dim=-1, keepdim=True)
            rows = (-1, dy.shape[-1])
            dweight = (dy * xhat if dweight_has_xhat else dy).reshape(rows).sum(dim=0)
            dbias = dy.reshape(rows).sum(dim=0) if ctx.has_bias else None
            return dx * rstd, dweight, dbias, None

    return lambda x, weight, bias, eps: LayerNorm.apply(x, weight, bias, eps)


LAYER_NORM_BACKWARD = (
    Mistake("misses_mean", "the backward misses the term -mean(g): the gradient through the mean (g = dy * weight)",
            (_layer_norm_backward(mean_term=False),), backward=True),
    Mistake("misses_variance", "the backward misses the term -xhat * mean(g * xhat): the gradient through the "
            "variance", (_layer_norm_backward(variance_term=False),), backward=True),
    Mistake("g_without_weight", "the backward uses dy where it needs g = dy * weight",
            (_layer_norm_backward(g_has_weight=False),), backward=True),
    Mistake("dweight_without_xhat", "the gradient of weight is sum(dy * xhat) over the rows, not sum(dy)",
            (_layer_norm_backward(dweight_has_xhat=False),), backward=True),
)  # fmt: skip


# attention_backward --------------------------------------------------------------------------
def _attention_backward(
    rowsum_term: bool = True, scaled: bool = True, dk_transposed: bool = True, dv_transposed: bool = True
) -> Callable[..., Tensor]:
    """A correct attention forward with a hand-written backward missing one piece of
    dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K s, dK = dS^T Q s (s = 1/sqrt(d))."""

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            probs = _softmax_over(-1)(_scores(q, k, causal))
            ctx.save_for_backward(q, k, v, probs)
            return probs @ v

        @staticmethod
        def backward(ctx, d_out):
            q, k, v, probs = ctx.saved_tensors
            scale = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
            d_probs = d_out @ v.transpose(-2, -1)
            rowsum = (d_probs * probs).sum(dim=-1, keepdim=True) if rowsum_term else 0.0
            d_scores = probs * (d_probs - rowsum)
            d_k = (d_scores.transpose(-2, -1) if dk_transposed else d_scores) @ q * scale
            d_v = (probs.transpose(-2, -1) if dv_transposed else probs) @ d_out
            return d_scores @ k * scale, d_k, d_v, None

    return lambda q, k, v, causal: Attention.apply(q, k, v, causal)


def _scores(q: Tensor, k: Tensor, causal: bool) -> Tensor:
    """q k^T / sqrt(d), masked causally with the queries aligned to the end of the keys: (B, H, Tq, Tk)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


ATTENTION_BACKWARD = (
    Mistake("misses_rowsum", "the backward misses the term -rowsum(dP * P): the softmax's backward is "
            "dS = P * (dP - rowsum(dP * P))", (_attention_backward(rowsum_term=False),), backward=True),
    Mistake("misses_scale", "the backward forgets the 1/sqrt(d) scale in dq and dk",
            (_attention_backward(scaled=False),), backward=True),
    Mistake("dk_not_transposed", "dK = dS Q is missing the transpose: dK = dS^T Q s, (Tk, Tq) @ (Tq, d), one row "
            "per key", (_attention_backward(dk_transposed=False),), backward=True),
    Mistake("dv_not_transposed", "dV = P dO is missing the transpose: dV = P^T dO, (Tk, Tq) @ (Tq, d), one row "
            "per key", (_attention_backward(dv_transposed=False),), backward=True),
)  # fmt: skip


# flash_attention -----------------------------------------------------------------------------
def _flash(rescale_sum: bool = True, rescale_output: bool = True) -> Callable[..., Tensor]:
    """Tiled attention with an online softmax that forgets one rescaling by exp(m_old - m_new)."""

    def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, tile: int) -> Tensor:
        n_queries, n_keys = q.shape[-2], k.shape[-2]
        offset = n_keys - n_queries
        rows = []
        for i in range(0, n_queries, tile):
            q_tile = q[..., i : i + tile, :] / math.sqrt(q.shape[-1])  # (B, H, tq, d)
            running_max = q_tile.new_full((*q_tile.shape[:-1], 1), float("-inf"))
            running_sum = q_tile.new_zeros((*q_tile.shape[:-1], 1))
            acc = torch.zeros_like(q_tile)
            for j in range(0, n_keys, tile):
                scores = q_tile @ k[..., j : j + tile, :].transpose(-2, -1)  # (B, H, tq, tk)
                if causal:
                    query = offset + i + torch.arange(scores.shape[-2], device=scores.device)
                    key = j + torch.arange(scores.shape[-1], device=scores.device)
                    scores = scores.masked_fill(key[None, :] > query[:, None], float("-inf"))
                new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
                probs = (scores - new_max).exp().nan_to_num(0.0)  # a fully masked tile adds nothing
                rescale = (running_max - new_max).exp().nan_to_num(0.0)
                running_sum = (running_sum * rescale if rescale_sum else running_sum) + probs.sum(-1, keepdim=True)
                acc = (acc * rescale if rescale_output else acc) + probs @ v[..., j : j + tile, :]
                running_max = new_max
            rows.append(acc / running_sum)
        return torch.cat(rows, dim=-2)

    return attention


FLASH_ATTENTION = (
    Mistake("sum_not_rescaled", "the running sum is not rescaled by exp(m_old - m_new) when the max grows",
            (_flash(rescale_sum=False),), tiled=True),
    Mistake("output_not_rescaled", "the output accumulator is not rescaled by exp(m_old - m_new) when the max grows",
            (_flash(rescale_output=False),), tiled=True),
)  # fmt: skip


# the model's modules ------------------------------------------------------------------------------------------------
# Each mistake is a class with the step's constructor, gpt-core's parameter names and one thing done wrong.
class _LayerNorm(nn.Module):
    def __init__(self, dim: int, kernel: Callable[..., Tensor]):
        super().__init__()
        self.weight, self.bias, self.kernel = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim)), kernel

    def forward(self, x: Tensor) -> Tensor:
        return self.kernel(x, self.weight, self.bias, 1e-5)


def _multi_head_attention(split: str = "right", merge: str = "right", causal: bool = True, project: bool = True):
    """The module with its heads split (`split`) or merged (`merge`) another way, non-causal, or unprojected."""

    class MultiHeadAttention(nn.Module):
        def __init__(self, n_embd: int, n_head: int, attention: Callable[..., Tensor]):
            super().__init__()
            self.n_head, self.attention = n_head, attention
            self.qkv, self.proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)

        def forward(self, x: Tensor) -> Tensor:
            B, T, C = x.shape
            H, d = self.n_head, C // self.n_head
            fused = self.qkv(x)  # (B, T, 3C)
            if split == "right":
                q, k, v = fused.view(B, T, 3, H, d).permute(2, 0, 3, 1, 4)
            elif split == "heads_strided":  # feature j of head h at j * H + h
                q, k, v = fused.view(B, T, 3, d, H).permute(2, 0, 4, 1, 3)
            elif split == "qkv_interleaved":  # [q_h k_h v_h] per head
                q, k, v = fused.view(B, T, H, 3, d).permute(3, 0, 2, 1, 4)
            elif split == "view":  # (B, T, C) read as (B, H, T, d)
                q, k, v = (part.reshape(B, H, T, d) for part in fused.split(C, dim=-1))
            else:  # "view_of_slice": the same by .view, which a slice of the fused output cannot take
                q, k, v = (part.view(B, H, T, d) for part in fused.split(C, dim=-1))
            y = self.attention(q, k, v, causal)  # (B, H, T, d)
            if merge == "right":
                y = y.transpose(1, 2).reshape(B, T, C)
            elif merge == "view":
                y = y.transpose(1, 2).view(B, T, C)
            else:  # "no_transpose": (B, H, T, d) read as (B, T, C)
                y = y.reshape(B, T, C)
            return self.proj(y) if project else y

    return MultiHeadAttention


MULTI_HEAD_ATTENTION = (
    Mistake("heads_strided", "heads split along the wrong axis: head h owns the d features h*d .. (h+1)*d - 1 of "
            "each of q, k, v: view(B, T, 3, n_head, d), not (B, T, 3, d, n_head)",
            (_multi_head_attention(split="heads_strided"),)),
    Mistake("qkv_interleaved", "the fused projection is [q | k | v], C features each, not [q k v] per head: "
            "view(B, T, 3, n_head, d), not (B, T, n_head, 3, d)", (_multi_head_attention(split="qkv_interleaved"),)),
    Mistake("view_not_transpose", "a view where a transpose is needed: (B, T, C) -> view(B, T, n_head, d) -> "
            "transpose(1, 2) is (B, n_head, T, d); view(B, n_head, T, d) mixes positions and heads",
            (_multi_head_attention(split="view"), _multi_head_attention(split="view_of_slice"))),
    Mistake("merge_not_transposed", "the merge reads (B, n_head, T, d) straight as (B, T, C), mixing heads and "
            "positions: y.transpose(1, 2) first, then reshape(B, T, C)",
            (_multi_head_attention(merge="no_transpose"),)),
    Mistake("merge_not_contiguous", "the merge calls .view on y.transpose(1, 2), which is not contiguous: use "
            ".reshape(B, T, C) (or .contiguous().view(B, T, C))", (_multi_head_attention(merge="view"),)),
    Mistake("not_causal", "attention is called with causal=False: every position sees the future",
            (_multi_head_attention(causal=False),)),
    Mistake("no_projection", "the output projection proj is never applied to the merged heads",
            (_multi_head_attention(project=False),)),
)  # fmt: skip


class _MLP(nn.Module):
    def __init__(self, n_embd: int, gelu: Callable[..., Tensor]):
        super().__init__()
        self.fc, self.gelu, self.proj = nn.Linear(n_embd, 4 * n_embd), gelu, nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.gelu(self.fc(x)))


def _block(layout: str = "pre", residual: tuple[bool, bool] = (True, True), gelu: bool = True):
    """The block with the norms placed another way (`layout`), a residual left out, or the MLP without GELU."""

    class Block(nn.Module):
        def __init__(self, n_embd: int, n_head: int, kernels: Any):
            super().__init__()
            self.ln1 = _LayerNorm(n_embd, kernels.layer_norm)
            self.attn = _multi_head_attention()(n_embd, n_head, kernels.attention)
            self.ln2 = _LayerNorm(n_embd, kernels.layer_norm)
            self.mlp = _MLP(n_embd, kernels.gelu if gelu else lambda h: h)

        def forward(self, x: Tensor) -> Tensor:
            for norm, layer, kept in ((self.ln1, self.attn, residual[0]), (self.ln2, self.mlp, residual[1])):
                if layout == "post":
                    x = norm(x + layer(x) if kept else layer(x))
                elif layout == "stream":  # the stream itself normalised, then added to
                    x = norm(x)
                    x = x + layer(x) if kept else layer(x)
                else:
                    x = x + layer(norm(x)) if kept else layer(norm(x))
            return x

    return Block


BLOCK = (
    Mistake("post_norm", "post-norm: the norm is applied after the residual add; GPT-2 is pre-norm, "
            "x + attn(ln1(x)), then x + mlp(ln2(x))", (_block(layout="post"),)),
    Mistake("residual_missing", "a residual is missing: each sub-layer adds to the stream, x = x + attn(ln1(x)) and "
            "x = x + mlp(ln2(x))", (_block(residual=(False, True)), _block(residual=(True, False)),
                                    _block(residual=(False, False)))),
    Mistake("norm_on_stream", "the norm is applied to the residual stream itself: normalise a copy for the "
            "sub-layer and add to x unnormalised, x = x + attn(ln1(x))", (_block(layout="stream"),)),
    Mistake("mlp_without_gelu", "the MLP has no GELU between fc and proj: two linear maps in a row are one",
            (_block(gelu=False),)),
)  # fmt: skip


def _gpt(first_position: int = 0, tied: bool = True, final_norm: bool = True):
    """The model with positions starting at `first_position`, an untied head, or no final norm."""

    class GPT(nn.Module):
        def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, kernels: Any):
            super().__init__()
            self.cross_entropy = kernels.cross_entropy
            self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(block_size, n_embd)
            self.blocks = nn.ModuleList(_block()(n_embd, n_head, kernels) for _ in range(n_layer))
            self.ln_f = _LayerNorm(n_embd, kernels.layer_norm)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            if tied:
                self.lm_head.weight = self.wte.weight

        def forward(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
            T = idx.shape[1]
            x = self.wte(idx) + self.wpe.weight[first_position : first_position + T]
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x) if final_norm else x)
            loss = None if targets is None else self.cross_entropy(logits.flatten(0, 1), targets.flatten())
            return logits, loss

    return GPT


MODEL = (
    Mistake("positions_off_by_one", "the positions are off by one: the first token is at position 0, "
            "wpe(torch.arange(T))", (_gpt(first_position=1),)),
    Mistake("head_untied", "the head is untied: lm_head.weight is a parameter of its own; share the token "
            "embedding, self.lm_head.weight = self.wte.weight", (_gpt(tied=False),)),
    Mistake("no_final_norm", "the final norm ln_f is never applied before the head", (_gpt(final_norm=False),)),
)  # fmt: skip


# training_step ------------------------------------------------------------------------------------------------------
# Each mistake is a training_step(model, state, inputs, targets, step, settings) with one thing done wrong.
_DECAYS: dict[str, Callable[[str, Tensor], bool]] = {
    "matrices": lambda name, param: param.dim() >= 2 and not name.startswith("wpe."),
    "everything": lambda name, param: True,
    "named_weight": lambda name, param: name.endswith("weight"),  # the norms' weights too, and the position table
    "all_but_positions": lambda name, param: not name.startswith("wpe."),
    "every_matrix": lambda name, param: param.dim() >= 2,  # the position table too
    "nothing": lambda name, param: False,
}
"""Which parameters a step decays: gpt-train's rule ("matrices") and the ways it is got wrong."""


def _schedule(step: int, s: Any, how: str = "right") -> float:
    """gpt-train's warm-up and cosine (`how` "right"), or one of its off-by-one forms, or no schedule at all."""
    if how == "constant":
        return s.lr
    warming = step <= s.warmup_steps if how == "warmup_one_long" else step < s.warmup_steps
    if warming:
        return s.lr * (step if how == "warmup_from_zero" else step + 1) / s.warmup_steps
    late = 1 if how == "cosine_one_late" else 0
    progress = min(1.0, (step + late - s.warmup_steps) / max(1, s.steps - s.warmup_steps))
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def _clip(model: nn.Module, max_norm: float, how: str) -> None:
    """Clip the gradients by their global norm (`how` "right"), each by its own, or without clip_grad_norm_'s 1e-6."""
    grads = [param.grad for param in model.parameters() if param.grad is not None]
    if how == "per_parameter":
        for grad in grads:
            grad.mul_((max_norm / (grad.norm() + 1e-6)).clamp(max=1.0))
        return
    total = torch.stack([grad.norm() for grad in grads]).norm()
    scale = (max_norm / (total + (0.0 if how == "no_eps" else 1e-6))).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale)


@torch.no_grad()
def _adamw(model: nn.Module, state: dict, lr: float, s: Any, decays: Callable[[str, Tensor], bool],
           decoupled: bool = True, bias_corrected: bool = True, eps: str = "outside") -> None:  # fmt: skip
    """AdamW (decoupled decay, bias-corrected moments, eps outside the root) or Adam with L2, no bias correction,
    or eps under the root ("inside") or before the correction ("uncorrected")."""
    t = state["t"] = state.get("t", 0) + 1
    for name, param in model.named_parameters():
        if param.grad is None:
            continue
        grad = param.grad
        if decays(name, param):
            if decoupled:
                param.mul_(1.0 - lr * s.weight_decay)
            else:
                grad = grad + s.weight_decay * param
        m, v = state.setdefault(name, (torch.zeros_like(param), torch.zeros_like(param)))
        m.mul_(s.beta1).add_(grad, alpha=1.0 - s.beta1)
        v.mul_(s.beta2).addcmul_(grad, grad, value=1.0 - s.beta2)
        c1, c2 = (1.0 - s.beta1**t, 1.0 - s.beta2**t) if bias_corrected else (1.0, 1.0)
        if eps == "inside":
            denominator = (v / c2 + 1e-8).sqrt()
        elif eps == "uncorrected":
            denominator = (v.sqrt() + 1e-8) / math.sqrt(c2)
        else:
            denominator = (v / c2).sqrt() + 1e-8
        param.sub_(lr * (m / c1) / denominator)


def _training_step(decay: str = "matrices", clip: str = "before", schedule: str = "right", decoupled: bool = True,
                   bias_corrected: bool = True, eps: str = "outside") -> Callable[..., Any]:  # fmt: skip
    """gpt-train's step with one thing done another way: which parameters decay, where (and how) it clips, the
    schedule, or AdamW's update."""

    def training_step(model: nn.Module, state: dict, inputs: Tensor, targets: Tensor, step: int, s: Any) -> Tensor:
        lr = _schedule(step, s, schedule)
        for param in model.parameters():
            param.grad = None
        _, loss = model(inputs, targets)
        loss.backward()
        clipping = s.grad_clip > 0 or clip == "when_off"
        if clipping and clip in ("before", "per_parameter", "no_eps", "when_off"):
            _clip(model, s.grad_clip, "right" if clip == "when_off" else clip)
        _adamw(model, state, lr, s, _DECAYS[decay], decoupled, bias_corrected, eps)
        if clipping and clip == "after":
            _clip(model, s.grad_clip, "right")
        return loss.detach()

    return training_step


TRAINING_STEP = (
    Mistake("decay_on_vectors", "weight decay is applied to biases and norms: AdamW's decay goes on the weight "
            "matrices alone (param.dim() >= 2), never on a bias or a LayerNorm's weight and bias",
            (_training_step(decay="everything"), _training_step(decay="named_weight"),
             _training_step(decay="all_but_positions"))),
    Mistake("position_table_decayed", "the position table wpe is decayed: gpt-train decays every weight matrix but "
            "wpe (shrinking it erases where each token sits); leave out the names that start with wpe.",
            (_training_step(decay="every_matrix"),)),
    Mistake("no_decay", "nothing is decayed: AdamW shrinks each weight matrix (but wpe) by lr * weight_decay of "
            "itself at every step, p -= lr * weight_decay * p", (_training_step(decay="nothing"),)),
    Mistake("clip_after_step", "the gradients are clipped after the optimiser step (or not at all), so the step took "
            "them unclipped: clip between backward() and the update", (_training_step(clip="after"),
                                                                          _training_step(clip="never"))),
    Mistake("clip_per_parameter", "each gradient is clipped by its own norm: clip by the global norm, the square "
            "root of the sum of every gradient's squared norm, one scale for all",
            (_training_step(clip="per_parameter"),)),
    Mistake("clip_without_eps", "the clip scale is grad_clip / total: gpt-train's (PyTorch's clip_grad_norm_) is "
            "grad_clip / (total + 1e-6)", (_training_step(clip="no_eps"),)),
    Mistake("clip_when_off", "grad_clip 0 turns clipping off: clip only when settings.grad_clip > 0 (a scale of "
            "0 / total wipes every gradient)", (_training_step(clip="when_off"),)),
    Mistake("schedule_off_by_one", "the learning-rate schedule is off by one: steps count from 0, the first step's "
            "rate is lr / warmup_steps (not 0), step warmup_steps - 1 ends the warm-up at lr, and the cosine starts "
            "at step warmup_steps, at lr", (_training_step(schedule="warmup_from_zero"),
                                            _training_step(schedule="warmup_one_long"),
                                            _training_step(schedule="cosine_one_late"))),
    Mistake("no_schedule", "the learning rate is settings.lr at every step: set it from the warm-up and the cosine, "
            "step by step", (_training_step(schedule="constant"),)),
    Mistake("decay_not_decoupled", "the weight decay is added to the gradient (Adam with L2), not decoupled: AdamW "
            "shrinks the weight itself, p -= lr * weight_decay * p, and the moments never see it",
            (_training_step(decoupled=False),)),
    Mistake("no_bias_correction", "the moments are not bias-corrected: divide m by 1 - beta1^t and v by "
            "1 - beta2^t, t = 1 at the first step", (_training_step(bias_corrected=False),)),
    Mistake("eps_misplaced", "epsilon is not where AdamW puts it: m_hat / (sqrt(v_hat) + 1e-8), outside the square "
            "root and after the bias correction", (_training_step(eps="inside"), _training_step(eps="uncorrected"))),
)  # fmt: skip


# generation ---------------------------------------------------------------------------------------------------------
# Each mistake is a generate(model, idx, max_new_tokens, temperature, top_k, use_cache, generator) with one thing done
# wrong; the model is the model step's GPT (wte, wpe, blocks, ln_f, lm_head).
def _next_token(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None,
                how_hot: str, how_top: str) -> Tensor:  # fmt: skip
    if temperature == 0:
        return logits.argmax(dim=-1)
    if how_hot == "before":
        logits = logits / temperature
    elif how_hot == "multiplied":
        logits = logits * temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k + (how_top == "k_plus_1"), dim=-1).values[:, -1:]  # (B, 1)
        dropped = logits <= kth if how_top == "k_minus_1" else logits < kth
        logits = logits.masked_fill(dropped, 0.0 if how_top == "zero_fill" else float("-inf"))
    exp = (logits - logits.amax(dim=-1, keepdim=True)).exp()
    probs = exp / exp.sum(dim=-1, keepdim=True)
    if how_hot == "after":
        probs = probs / temperature
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _forward(model: nn.Module, idx: Tensor, cache: list | None, offset: bool) -> Tensor:
    """The GPT's forward on the new tokens, each block's keys and values appended to `cache`; the new tokens'
    positions after the cached ones (`offset`) or from 0."""
    B, T = idx.shape
    start = cache[0][0].shape[2] if cache and offset else 0
    x = model.wte(idx) + model.wpe(torch.arange(start, start + T, device=idx.device))
    for i, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = attn.qkv(block.ln1(x)).view(B, T, 3, attn.n_head, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if i < len(cache):
                k, v = torch.cat((cache[i][0], k), dim=2), torch.cat((cache[i][1], v), dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
        x = x + attn.proj(attn.attention(q, k, v, True).transpose(1, 2).reshape(B, T, -1))
        x = x + block.mlp(block.ln2(x))
    return model.lm_head(model.ln_f(x))


def _generate(temperature: str = "before", top_k: str = "right", offset: bool = True) -> Callable[..., Tensor]:
    """gpt-core's generate with the temperature applied another way, top-k keeping another number of tokens (or
    filling with 0), or the cached tokens' positions not offset."""

    @torch.no_grad()
    def generate(model: nn.Module, idx: Tensor, max_new_tokens: int, temp: float, k: int | None, use_cache: bool,
                 generator: torch.Generator | None) -> Tensor:  # fmt: skip
        cache = [] if use_cache else None
        logits, out = _forward(model, idx, cache, offset), idx
        for i in range(max_new_tokens):
            token = _next_token(logits[:, -1, :], temp, k, generator, temperature, top_k)
            out = torch.cat((out, token[:, None]), dim=1)
            if i < max_new_tokens - 1:
                fed = token[:, None] if use_cache else out
                logits = _forward(model, fed, cache, offset)
        return out

    return generate


GENERATION = (
    Mistake("temperature_after_softmax", "the temperature changes nothing: applied after the softmax (probs / T), it "
            "is undone when the draw normalises the probabilities; divide the logits by T before the softmax",
            (_generate(temperature="after"), _generate(temperature="ignored"))),
    Mistake("temperature_multiplied", "the logits are multiplied by the temperature: divide them, logits / T, so that "
            "T < 1 sharpens the distribution and T > 1 flattens it", (_generate(temperature="multiplied"),)),
    Mistake("top_k_keeps_k_plus_1", "top-k keeps k + 1 tokens: the k-th best is logits.topk(k).values[:, -1:] (index "
            "k - 1 of the sorted logits), and every logit below it is masked", (_generate(top_k="k_plus_1"),)),
    Mistake("top_k_keeps_k_minus_1", "top-k keeps k - 1 tokens: mask the logits strictly below the k-th best (<), "
            "not the k-th best itself (<=)", (_generate(top_k="k_minus_1"),)),
    Mistake("top_k_fills_zero", "the logits outside the top k are set to 0, not -inf: exp(0) still gives them "
            "weight", (_generate(top_k="zero_fill"),)),
    Mistake("cache_positions_not_offset", "the cache's positions are not offset: a token fed after n cached "
            "positions sits at position n, wpe(torch.arange(n, n + T)), not at 0", (_generate(offset=False),)),
)  # fmt: skip


OWN: dict[str, tuple[Mistake, ...]] = {
    "softmax": SOFTMAX,
    "attention": ATTENTION,
    "layer_norm": LAYER_NORM,
    "gelu": GELU,
    "cross_entropy": CROSS_ENTROPY,
    "layer_norm_backward": LAYER_NORM_BACKWARD,
    "attention_backward": ATTENTION_BACKWARD,
    "flash_attention": FLASH_ATTENTION,
    "multi_head_attention": MULTI_HEAD_ATTENTION,
    "block": BLOCK,
    "model": MODEL,
    "training_step": TRAINING_STEP,
    "generation": GENERATION,
}
"""The mistakes each step is about."""

FORWARD_OF = {"layer_norm_backward": "layer_norm", "attention_backward": "attention", "flash_attention": "attention"}

MISTAKES: dict[str, tuple[Mistake, ...]] = {
    step: own + OWN.get(FORWARD_OF.get(step, ""), ()) for step, own in OWN.items()
}
"""Each kernel step's mistakes in the order they are tried: its own first, then those of its slot's forward step."""
