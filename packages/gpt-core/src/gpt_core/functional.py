"""The functions PyTorch would otherwise supply, written by hand on tensors.

softmax, log_softmax and dropout are short enough that autograd's own backward is already
what a person would write. layer_norm, gelu and cross_entropy are `torch.autograd.Function`s
with backward passes derived by hand: autograd would save every intermediate of the forward
and replay one kernel per operation, while the closed-form gradient needs only a couple of
saved tensors and a handful of kernels. Where no gradient is being recorded (generation,
evaluation), layer_norm and gelu run the same forward without the Function's per-call
bookkeeping. Every function here is pinned, forward and backward, against its PyTorch built-in
in `tests/test_functional.py`.

Under mixed precision (bf16 or fp16 activations) the statistics stay in float32: softmax's and
log-softmax's max and sum, LayerNorm's mean and variance, and the cross-entropy's log-sum-exp are
computed on `upcast` inputs and the result handed back in the input's dtype. A bf16 sum or mean
of rows keeps 8 significant bits: a LayerNorm mean rounded to bf16 is off by up to 2^-9 of the
mean itself, which is the whole signal when the mean is large against the spread; a loss of 10
rounded to bf16 is off by up to 0.03. Float32 and float64 inputs take exactly the path they took
before (`upcast` hands them back untouched), so their results are bit-identical.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

IGNORE_INDEX = -100
"""Target value for positions a task does not score (the same default as PyTorch's)."""

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715
_HALF_PRECISION = (torch.float16, torch.bfloat16)


def upcast(x: Tensor) -> Tensor:
    """`x` in float32 if it is a 16-bit float (bf16, fp16), else `x` itself, uncopied: the dtype the
    hand-written kernels compute their statistics in."""
    return x.float() if x.dtype in _HALF_PRECISION else x


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)), shifted by the max first so large logits cannot overflow; computed in
    float32 for 16-bit input and returned in the input's dtype."""
    wide = upcast(x)
    exp = (wide - wide.amax(dim=dim, keepdim=True)).exp()
    return (exp / exp.sum(dim=dim, keepdim=True)).to(x.dtype)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x), computed as (x - max) - log(sum(exp(x - max))); in float32 for 16-bit input,
    returned in the input's dtype."""
    wide = upcast(x)
    shifted = wide - wide.amax(dim=dim, keepdim=True)
    return (shifted - shifted.exp().sum(dim=dim, keepdim=True).log()).to(x.dtype)


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None = None) -> Tensor:
    """Zero each element with probability p and rescale the rest by 1/(1-p) (inverted dropout)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:  # everything dropped; x * keep / (1 - p) would be 0/0 = nan
        return x * 0.0
    keep = torch.rand(x.shape, device=x.device, generator=generator) >= p
    return x * keep / (1.0 - p)


def _layer_norm_forward(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """The normalised, scaled and shifted output (in x's dtype), with the xhat and 1/std its backward
    needs (float32 at least: the statistics are never rounded to 16 bits)."""
    width = x.shape[-1]
    wide, weight = upcast(x), upcast(weight)
    xhat = wide - wide.mean(dim=-1, keepdim=True)  # centred, normalised in place below
    norm = torch.linalg.vector_norm(xhat, dim=-1, keepdim=True)  # sqrt(width * var)
    rstd = norm.square_().div_(width).add_(eps).rsqrt_()
    xhat.mul_(rstd)
    y = torch.addcmul(upcast(bias), xhat, weight) if bias is not None else xhat * weight
    return y.to(x.dtype), xhat, rstd


class _LayerNorm(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension.

    Backward, with xhat the normalised input and g = dy * weight:
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    The two row means are matrix-vector products, mean(g) = dy @ weight / C and
    mean(g * xhat) = (dy * xhat) @ weight / C, and dy * xhat is needed anyway for the weight's
    gradient: so the backward allocates two (N, C) buffers and the forward two (xhat and y). On
    CPU a fresh buffer is memory outside the cache, and filling it costs more than the arithmetic
    on rows of 64-128 features. The variance comes from the norm of the centred rows (one
    reduction, no scratch buffer); torch.var_mean measured ~14x slower on such rows.

    16-bit inputs are normalised in float32 and the gradients computed in float32 from the saved
    float32 xhat and 1/std, then handed back in each input's own dtype.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        y, xhat, rstd = _layer_norm_forward(x, weight, bias, eps)
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xhat, rstd, weight = ctx.saved_tensors
        width = dy.shape[-1]
        dtypes = (dy.dtype, weight.dtype)  # of x, and of weight and bias
        dy, weight = upcast(dy), upcast(weight)
        dy_xhat = dy * xhat
        rstd_over_width = rstd / width  # (..., 1)
        mean_g = (dy @ weight).unsqueeze(-1).mul_(rstd_over_width)  # rstd * mean(g)
        mean_g_xhat = (dy_xhat @ weight).unsqueeze(-1).mul_(rstd_over_width)  # rstd * mean(g * xhat)
        dx = (dy * weight).mul_(rstd).sub_(mean_g).addcmul_(xhat, mean_g_xhat, value=-1.0)
        rows = (-1, width)  # sum the parameter gradients over every leading dimension
        dweight = dy_xhat.reshape(rows).sum(dim=0).to(dtypes[1])
        dbias = dy.reshape(rows).sum(dim=0).to(dtypes[1]) if ctx.has_bias else None
        return dx.to(dtypes[0]), dweight, dbias, None


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last dimension, with a hand-derived backward."""
    if not torch.is_grad_enabled():  # no graph to record: skip the Function's bookkeeping
        return _layer_norm_forward(x, weight, bias, eps)[0]
    return _LayerNorm.apply(x, weight, bias, eps)


def _gelu_gate(x: Tensor) -> Tensor:
    """s = sigmoid(2u), so that gelu(x) = x s.

    One scratch tensor becomes 2u and then s in place: in a training step an allocating multiply
    of a (B, T, 4C) tensor measured ~10x slower on CPU than an in-place one, so the forward
    allocates only s and the output.
    """
    return (x * x).mul_(2.0 * _GELU_C * _GELU_A).add_(2.0 * _GELU_C).mul_(x).sigmoid_()


class _GELU(torch.autograd.Function):
    """GELU in its tanh form: 0.5 x (1 + tanh(u)), u = c (x + a x^3), c = sqrt(2/pi), a = 0.044715.

    Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u): the same function, but
    PyTorch's CPU sigmoid measured ~9x faster than its tanh. With s = sigmoid(2u),
        y = x s,    dy/dx = s + x s (1 - s) 2c (1 + 3a x^2).
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        s = _gelu_gate(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, dy: Tensor) -> Tensor:
        x, s = ctx.saved_tensors
        slope = (x * x).mul_(6.0 * _GELU_C * _GELU_A).add_(2.0 * _GELU_C)  # d(2u)/dx
        slope.mul_(x).mul_(s)  # a = x s d(2u)/dx
        slope.addcmul_(slope, s, value=-1.0)  # a (1 - s)
        return slope.add_(s).mul_(dy)


def gelu(x: Tensor) -> Tensor:
    """The tanh approximation of GELU used by GPT-2, with a hand-derived backward."""
    if not torch.is_grad_enabled():  # no graph to record: skip the Function's bookkeeping
        return x * _gelu_gate(x)
    return _GELU.apply(x)


class _CrossEntropy(torch.autograd.Function):
    """Mean negative log-likelihood of the targets over the scored (non-ignored) rows.

    Backward: (softmax(logits) - onehot(target)) / n_scored on scored rows, zero elsewhere.
    Keeps the logits and the per-row logsumexp; the softmax is rebuilt in one pass.

    16-bit logits: the log-sum-exp, the loss and the softmax of the backward are computed in float32;
    the loss stays float32 (as PyTorch's cross-entropy gives under autocast), the gradient is handed
    back in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
        wide = upcast(logits)
        scored = targets != ignore_index
        safe_targets = torch.where(scored, targets, 0)
        row_max = wide.amax(dim=-1, keepdim=True)
        lse = row_max + (wide - row_max).exp().sum(dim=-1, keepdim=True).log()  # (N, 1)
        picked = wide.gather(-1, safe_targets.unsqueeze(-1))  # (N, 1)
        n_scored = scored.sum()
        loss = ((lse - picked).squeeze(-1) * scored).sum() / n_scored
        ctx.save_for_backward(logits, lse, safe_targets, scored, n_scored)  # 16-bit logits kept as given
        return loss

    @staticmethod
    def backward(ctx, dloss: Tensor):
        logits, lse, safe_targets, scored, n_scored = ctx.saved_tensors
        grad = (upcast(logits) - lse).exp_()
        grad.scatter_add_(-1, safe_targets.unsqueeze(-1), torch.full_like(lse, -1.0))
        grad.mul_((scored.unsqueeze(-1) * (dloss / n_scored)).to(grad.dtype))
        return grad.to(logits.dtype), None, None


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Mean cross-entropy of `logits` (..., V) against integer `targets` (...).

    Positions whose target equals `ignore_index` are not scored and get zero gradient. If no
    position is scored the mean is 0/0 = nan, as in PyTorch.
    """
    vocab = logits.shape[-1]
    return _CrossEntropy.apply(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index)
