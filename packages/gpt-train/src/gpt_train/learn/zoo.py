"""The classic mistakes of each step, each written out as the function that makes it.

A failing kernel is run on the same inputs as every mistake of its step (`cases`); the first mistake it
agrees with is named. A forward mistake is matched on the outputs alone (what is wrong is already in
the forward); a backward mistake, whose forward is right, on the outputs and every gradient.

One short function per mistake: the module's length is the list of mistakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import IGNORE_INDEX
from gpt_core import reference as ref

_GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Mistake:
    """A named mistake: what to tell the learner, and one or more kernels that make it."""

    key: str
    message: str
    kernels: tuple[Callable[..., Tensor], ...]
    backward: bool = False  # matched on the gradients too
    tiled: bool = False  # its kernels take the learner's tile size, `tile=`


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
            (_softmax_without_max,)),
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
) -> Callable[..., Tensor]:
    """Attention with one thing done wrong: the scale d^-scale_power, the mask's diagonal and alignment, when it
    masks, what it fills, whether it masks the weights after the softmax, and the softmax's axis."""

    def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** scale_power  # (B, H, Tq, Tk)
        n_queries, n_keys = scores.shape[-2:]
        offset = n_keys - n_queries if end_aligned else 0
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device).tril(offset + diagonal)
        mask = masked == "always" or (masked == "causal" and causal)
        if mask and not after_softmax:
            scores = scores.masked_fill(~allowed, fill)
        weights = _softmax_over(softmax_dim)(scores)
        if mask and after_softmax:
            weights = weights * allowed
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
)  # fmt: skip


# layer_norm ----------------------------------------------------------------------------------
def _layer_norm(
    ddof: int = 0, eps_inside: bool = True, use_eps: bool = True, root: bool = True, use_bias: bool = True
) -> Callable[..., Tensor]:
    def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        centred = x - x.mean(dim=-1, keepdim=True)
        var = centred.square().sum(dim=-1, keepdim=True) / (x.shape[-1] - ddof)
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
)  # fmt: skip


# gelu ----------------------------------------------------------------------------------------
def _gelu_tanh_form(c: float = _GELU_C, a: float = 0.044715, half: float = 0.5) -> Callable[[Tensor], Tensor]:
    return lambda x: half * x * (1.0 + torch.tanh(c * (x + a * x**3)))


def _gelu_erf(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _gelu_sigmoid(x: Tensor) -> Tensor:
    return x * torch.sigmoid(1.702 * x)


def _gelu_tanh_by_exp(x: Tensor) -> Tensor:
    e = (2.0 * _GELU_C * (x + 0.044715 * x**3)).exp()
    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))


GELU = (
    Mistake("erf", "erf GELU, the slot is the tanh approximation", (_gelu_erf,)),
    Mistake("sigmoid", "x sigmoid(1.702 x) is another approximation; the slot is the tanh one", (_gelu_sigmoid,)),
    Mistake("no_cubic", "the cubic term 0.044715 x^3 inside the tanh is missing", (_gelu_tanh_form(a=0.0),)),
    Mistake("sqrt_2pi", "the constant is sqrt(2/pi), not sqrt(2 pi)", (_gelu_tanh_form(c=math.sqrt(2 * math.pi)),)),
    Mistake("no_half", "the factor 0.5 is missing", (_gelu_tanh_form(half=1.0),)),
    Mistake("tanh_by_exp", "tanh written with exp overflows on large inputs (inf / inf): use torch.tanh",
            (_gelu_tanh_by_exp,)),
)  # fmt: skip


# cross_entropy -------------------------------------------------------------------------------
def _per_row_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """logsumexp - the target's logit, each row (N,); a row whose target is -100 picks no logit."""
    onehot = targets.unsqueeze(-1) == torch.arange(logits.shape[-1], device=logits.device)  # (N, V); all False for -100
    row_max = logits.amax(dim=-1, keepdim=True)
    lse = (logits - row_max).exp().sum(dim=-1).log() + row_max.squeeze(-1)
    return lse - (logits * onehot).sum(dim=-1)


def _scored_rows_over(denominator: str) -> Callable[[Tensor, Tensor], Tensor]:
    def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
        scored = targets != IGNORE_INDEX
        total = (_per_row_loss(logits, targets) * scored).sum()
        return {"all": total / len(targets), "none": total}[denominator]

    return cross_entropy


CROSS_ENTROPY = (
    Mistake("ignored_scored", "targets equal to -100 were scored: leave those rows out of the loss and the mean",
            (lambda logits, targets: _per_row_loss(logits, targets).mean(),)),
    Mistake("mean_over_all", "the mean is over all N rows; divide by the number of scored targets (not -100)",
            (_scored_rows_over("all"),)),
    Mistake("summed", "the loss is summed; it is the mean over the scored targets", (_scored_rows_over("none"),)),
    Mistake("sign", "the sign is flipped: the loss is minus the log-probability of the target",
            (lambda logits, targets: -ref.cross_entropy(logits, targets),)),
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
def _attention_backward(rowsum_term: bool = True, scaled: bool = True) -> Callable[..., Tensor]:
    """A correct attention forward with a hand-written backward missing one piece of
    dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K s, dK = dS^T Q s (s = 1/sqrt(d))."""

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal):
            probs = ref.softmax(_scores(q, k, causal))
            ctx.save_for_backward(q, k, v, probs)
            return probs @ v

        @staticmethod
        def backward(ctx, d_out):
            q, k, v, probs = ctx.saved_tensors
            scale = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
            d_probs = d_out @ v.transpose(-2, -1)
            rowsum = (d_probs * probs).sum(dim=-1, keepdim=True) if rowsum_term else 0.0
            d_scores = probs * (d_probs - rowsum)
            return d_scores @ k * scale, d_scores.transpose(-2, -1) @ q * scale, probs.transpose(-2, -1) @ d_out, None

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


OWN: dict[str, tuple[Mistake, ...]] = {
    "softmax": SOFTMAX,
    "attention": ATTENTION,
    "layer_norm": LAYER_NORM,
    "gelu": GELU,
    "cross_entropy": CROSS_ENTROPY,
    "layer_norm_backward": LAYER_NORM_BACKWARD,
    "attention_backward": ATTENTION_BACKWARD,
    "flash_attention": FLASH_ATTENTION,
}
"""The mistakes each kernel step is about."""

FORWARD_OF = {"layer_norm_backward": "layer_norm", "attention_backward": "attention", "flash_attention": "attention"}

MISTAKES: dict[str, tuple[Mistake, ...]] = {
    step: own + OWN.get(FORWARD_OF.get(step, ""), ()) for step, own in OWN.items()
}
"""Each kernel step's mistakes in the order they are tried: its own first, then those of its slot's forward step."""
