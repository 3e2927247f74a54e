"""GELU in GPT-2's tanh form as two elementwise Triton kernels, forward and a hand-derived backward.

    gelu(x) = 0.5 x (1 + tanh(u)),   u = c (x + a x^3),   c = sqrt(2/pi),   a = 0.044715

Through the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) = sigmoid(2u), with s = sigmoid(2u):
    y = x s
    dy/dx = s + x ds/dx,   ds/dx = s (1 - s) d(2u)/dx = s (1 - s) 2c (1 + 3a x^2)
so  dx = dy * (s + x s (1 - s) 2c (1 + 3a x^2)).
(sigmoid' = sigmoid (1 - sigmoid), and d(2u)/dx = 2c (1 + 3a x^2).) Far out on either side s is
exactly 0 or 1 and both formulas stay finite: exp(-2u) may overflow to inf, and 1 / inf is 0.

Why it is fast on a GPU: each kernel reads its inputs once and writes its output once (x -> y;
x, dy -> dx), with the polynomial, the exponential and the derivative in registers between the two.
The backward recomputes s from x instead of saving it: a few flops, cheaper than writing and reading
back an (N, 4C) tensor, and the forward saves only x. Elementwise work is limited by memory
bandwidth, so one read and one write per element is as fast as GELU can be on its own.

The bias of the product before GELU (the MLP's first Linear) is already added inside the matmul:
addmm adds it in the GEMM's epilogue, so there is no separate bias pass here to fuse into this kernel.
The maths is float32 for bf16 and fp16 (float64 for float64, how the kernels are verified).
"""

from __future__ import annotations

import math
import warnings

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once

# Triton's interpreter computes with numpy, which warns where exp(-2u) overflows to inf: here that is intended.
warnings.filterwarnings("ignore", "overflow encountered in exp", RuntimeWarning, r"triton\.")

_TWO_C = 2.0 * math.sqrt(2.0 / math.pi)  # d(2u)/dx at x = 0
_A = 0.044715
BLOCK = 1024  # elements per program


@triton.jit
def _gelu_forward_kernel(X, Y, n, TWO_C: tl.constexpr, A: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(acc)  # (BLOCK,)
    s = 1.0 / (1.0 + tl.exp(-TWO_C * x * (1.0 + A * x * x)))  # sigmoid(2u)
    tl.store(Y + offs, (x * s).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_backward_kernel(X, DY, DX, n, TWO_C: tl.constexpr, A: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(acc)  # (BLOCK,)
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(acc)  # (BLOCK,)
    s = 1.0 / (1.0 + tl.exp(-TWO_C * x * (1.0 + A * x * x)))  # sigmoid(2u), recomputed
    slope = s + x * s * (1.0 - s) * TWO_C * (1.0 + 3.0 * A * x * x)  # dy/dx
    tl.store(DX + offs, (dy * slope).to(DX.dtype.element_ty), mask=mask)


def _forward(x: Tensor) -> Tensor:
    """gelu(x) for a contiguous x: one program per BLOCK elements."""
    y = torch.empty_like(x)  # contiguous, like x
    _gelu_forward_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), TWO_C=_TWO_C, A=_A, BLOCK=BLOCK)
    return y


class _GELU(torch.autograd.Function):
    """y = x sigmoid(2u); dx = dy (s + x s (1 - s) 2c (1 + 3a x^2)), s recomputed from x."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return _forward(x)

    @staticmethod
    @differentiates_once
    def backward(ctx, dy: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(x)
        _gelu_backward_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, dy, dx, x.numel(), TWO_C=_TWO_C, A=_A, BLOCK=BLOCK)
        return dx


def gelu(x: Tensor) -> Tensor:
    """The tanh approximation of GELU used by GPT-2, as Triton kernels (any shape and layout)."""
    x = x.contiguous()  # elementwise: any order of the elements works, but the kernel reads them flat
    if not (torch.is_grad_enabled() and x.requires_grad):  # nothing to record: the forward kernel alone
        return _forward(x)
    return _GELU.apply(x)


AOT_SPECS = [
    (kernel, {**tensors, "n": "i32", "TWO_C": "constexpr", "A": "constexpr", "BLOCK": "constexpr"},
     {"TWO_C": _TWO_C, "A": _A, "BLOCK": BLOCK}, {})  # launched with Triton's default warps and stages
    for dtype in ("fp32", "bf16", "fp16")
    for kernel, tensors in (
        (_gelu_forward_kernel, {"X": f"*{dtype}", "Y": f"*{dtype}"}),
        (_gelu_backward_kernel, {"X": f"*{dtype}", "DY": f"*{dtype}", "DX": f"*{dtype}"}),
    )
]  # fmt: skip
"""(kernel, signature, constexprs, options) to compile ahead of time (triton.compiler.ASTSource, e.g. for sm_80
and sm_90): float32, bf16 and fp16, BLOCK elements a program (any tensor size). Nothing is compiled at import."""
