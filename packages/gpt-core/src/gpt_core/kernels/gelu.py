"""GELU in GPT-2's tanh form, with a hand-derived backward.

    gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)

Autograd would save every intermediate of the polynomial and the tanh; the closed-form gradient
(in `_GELU`) needs x and one gate. Without a gradient to record, the forward runs bare.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.reference import upcast

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_gate(x: Tensor) -> Tensor:
    """s = sigmoid(2u), so that gelu(x) = x s, in place in one scratch tensor: each fresh (B, T, 4C) buffer costs."""
    return (x * x).mul_(2.0 * _GELU_C * _GELU_A).add_(2.0 * _GELU_C).mul_(x).sigmoid_()


class _GELU(torch.autograd.Function):
    """Through 0.5 (1 + tanh(u)) = sigmoid(2u), since PyTorch's CPU sigmoid is faster than its tanh. With
    u = c (x + a x^3), c = sqrt(2/pi), a = 0.044715 and s = sigmoid(2u):
        y = x s,    dy/dx = s + x s (1 - s) 2c (1 + 3a x^2).
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        s = _gelu_gate(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    @differentiates_once
    def backward(ctx, dy: Tensor) -> Tensor:
        x, s = map(upcast, ctx.saved_tensors)  # float16's x d(2u)/dx is inf from |x| = 68, and inf (1 - s) is nan
        slope = (x * x).mul_(6.0 * _GELU_C * _GELU_A).add_(2.0 * _GELU_C)  # d(2u)/dx
        slope.mul_(x).mul_(s)  # a = x s d(2u)/dx
        slope.addcmul_(slope, s, value=-1.0)  # a (1 - s)
        return slope.add_(s).mul_(dy).to(dy.dtype)


def gelu(x: Tensor) -> Tensor:
    """The tanh approximation of GELU used by GPT-2, with a hand-derived backward."""
    if not torch.is_grad_enabled():  # no graph to record: skip the Function's bookkeeping
        return x * _gelu_gate(x)
    return _GELU.apply(x)
