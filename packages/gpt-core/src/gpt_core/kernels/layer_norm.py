"""LayerNorm over the last dimension, with a hand-derived backward.

    y = (x - mean) / sqrt(var + eps) * weight + bias,   var the biased variance of the row

The closed-form gradient (`_LayerNorm`) needs only xhat and 1/std, where autograd saves every intermediate; mean and
variance are float32 for 16-bit inputs. Under torch.compile it is the plain formula, whose backward the compiler
fuses itself (Inductor on CUDA can compile `_LayerNorm`'s backward wrong).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.reference import layer_norm as layer_norm_formula
from gpt_core.reference import upcast


def _layer_norm_forward(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """The output in x's dtype, with the xhat and 1/std (float32 at least) its backward needs."""
    width = x.shape[-1]
    wide, weight = upcast(x), upcast(weight)
    xhat = wide - wide.mean(dim=-1, keepdim=True)  # centred, normalised in place below
    norm = torch.linalg.vector_norm(xhat, dim=-1, keepdim=True)  # sqrt(width * var)
    rstd = norm.square_().div_(width).add_(eps).rsqrt_()
    xhat.mul_(rstd)
    y = torch.addcmul(upcast(bias), xhat, weight) if bias is not None else xhat * weight
    return y.to(x.dtype), xhat, rstd


class _LayerNorm(torch.autograd.Function):
    """Backward, with xhat the normalised input and g = dy * weight:
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    The row means are matrix-vector products, mean(g) = dy @ weight / C and mean(g * xhat) = (dy * xhat) @ weight / C,
    and dy * xhat is the weight's gradient's anyway: two (N, C) buffers, since on CPU filling a fresh buffer costs
    more than the arithmetic on short rows. The variance is the centred rows' norm: one reduction, no scratch.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        y, xhat, rstd = _layer_norm_forward(x, weight, bias, eps)
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @differentiates_once
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
    if torch.compiler.is_compiling():  # the compiler's own backward of the formula
        wide_bias = upcast(bias) if bias is not None else None
        return layer_norm_formula(upcast(x), upcast(weight), wide_bias, eps).to(x.dtype)
    if not torch.is_grad_enabled():  # no graph to record: skip the Function's bookkeeping
        return _layer_norm_forward(x, weight, bias, eps)[0]
    return _LayerNorm.apply(x, weight, bias, eps)
