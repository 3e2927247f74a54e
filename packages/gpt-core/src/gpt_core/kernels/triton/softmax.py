"""Softmax over the last dimension as two Triton kernels, forward and a hand-derived backward.

    y_i = exp(x_i - m) / sum_j exp(x_j - m),   m = max_j x_j
(the shift changes nothing and keeps exp from overflowing). Backward: dy_i/dx_k = y_i ([i == k] - y_k), so
    dx = y * (dy - sum_j dy_j y_j)
which needs only the saved output y, not x.

Why it is fast on a GPU: one program per row, in two passes over it, BLOCK_C entries at a time. The first
keeps a running max m and a running sum s of exp(x - m) (online: when the max grows to m', s is rescaled
by exp(m - m')); the second writes exp(x - m) / s. A row of up to BLOCK_C = 4096 entries (every attention
row, a small vocabulary) is one block, and the second pass re-reads what the first has just brought into
the cache: from memory each row is read once and written once, and no (N, C) intermediate such as
exp(x - m) is ever stored, where the composed formula writes and re-reads one per operation. Wider rows
(sampling from a 50304-entry vocabulary) stream through in blocks, so no row is too long for the registers.
The backward is the same: a first pass sums dy * y, a second writes dx.

Statistics are float32 for bf16 and fp16 (float64 for float64, how the kernels are verified), and y is
handed back in the input's dtype. Rows may hold -inf (masked attention scores): they get weight 0.
A row of only -inf has no softmax (0/0 = nan, as in PyTorch), and should not be passed.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once


@triton.jit
def online_max_and_sum(row, n, BLOCK: tl.constexpr):
    """(m, s): the max m of a row's n entries and s = sum exp(x - m), in one pass BLOCK entries at a time, s rescaled
    by exp(m - m') whenever the max grows to m'. In float32 (float64 for float64); the loss's kernel uses it too."""
    acc = tl.float64 if row.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    m = tl.cast(float("-inf"), acc)  # running max
    s = tl.cast(0.0, acc)  # running sum of exp(x - m)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)  # (BLOCK,)
        x = tl.load(row + cols, mask=cols < n, other=float("-inf")).to(acc)  # (BLOCK,)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # while all is -inf: exp(-inf - 0) = 0, not nan
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    return m, s


@triton.jit
def _softmax_forward_kernel(X, Y, x_row_stride, y_row_stride, C, BLOCK_C: tl.constexpr):
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * x_row_stride, Y + row * y_row_stride
    m, s = online_max_and_sum(x_row, C, BLOCK_C)  # the first pass
    for start in range(0, C, BLOCK_C):
        cols = start + tl.arange(0, BLOCK_C)  # (BLOCK_C,)
        mask = cols < C
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(acc)  # (BLOCK_C,)
        tl.store(y_row + cols, (tl.exp(x - m) / s).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(Y, DY, DX, y_row_stride, dy_row_stride, dx_row_stride, C, BLOCK_C: tl.constexpr):
    acc = tl.float64 if Y.dtype.element_ty == tl.float64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    y_row, dy_row, dx_row = Y + row * y_row_stride, DY + row * dy_row_stride, DX + row * dx_row_stride
    dot = tl.cast(0.0, acc)  # sum_j dy_j y_j
    for start in range(0, C, BLOCK_C):
        cols = start + tl.arange(0, BLOCK_C)  # (BLOCK_C,)
        mask = cols < C
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
        dot += tl.sum(tl.load(dy_row + cols, mask=mask, other=0.0).to(acc) * y, axis=0)
    for start in range(0, C, BLOCK_C):
        cols = start + tl.arange(0, BLOCK_C)  # (BLOCK_C,)
        mask = cols < C
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
        tl.store(dx_row + cols, (y * (dy - dot)).to(DX.dtype.element_ty), mask=mask)


def _block_c(width: int) -> int:
    """Entries per block: the whole row up to 4096 (16 KiB of float32), else 4096 at a time."""
    return min(triton.next_power_of_2(width), 4096)


def warps_for(block: int) -> int:
    """More warps for wider rows (or blocks): about 256 elements a warp (8 a thread), between 1 and 16 warps. The
    layer norm and the loss launch with it too."""
    return min(max(block // 256, 1), 16)


def rows_of(t: Tensor, width: int) -> Tensor:
    """t as (rows, width) with unit column stride: a view where one exists, else a contiguous copy."""
    t = t.reshape(-1, width)
    return t if t.stride(-1) == 1 else t.contiguous()


def _forward(x: Tensor) -> Tensor:
    """softmax(x) over the last dimension, in x's shape and dtype (contiguous)."""
    width = x.shape[-1]
    rows = rows_of(x, width)  # (N, C)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)  # (N, C)
    block = _block_c(width)
    _softmax_forward_kernel[(rows.shape[0],)](
        rows, y, rows.stride(0), y.stride(0), width, BLOCK_C=block, num_warps=warps_for(block)
    )
    return y.view(x.shape)


class _Softmax(torch.autograd.Function):
    """y = softmax(x) over the last dimension; dx = y * (dy - rowsum(dy * y)) from the saved y."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = _forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @differentiates_once
    def backward(ctx, dy: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        width = y.shape[-1]
        y_rows, dy_rows = rows_of(y, width), rows_of(dy, width)  # (N, C) each
        dx = torch.empty(y_rows.shape, dtype=y.dtype, device=y.device)  # (N, C)
        block = _block_c(width)
        _softmax_backward_kernel[(y_rows.shape[0],)](
            y_rows, dy_rows, dx, y_rows.stride(0), dy_rows.stride(0), dx.stride(0), width,
            BLOCK_C=block, num_warps=warps_for(block),
        )  # fmt: skip
        return dx.view(y.shape)


def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension (any leading shape, any row length), as Triton kernels."""
    if not (torch.is_grad_enabled() and x.requires_grad):  # nothing to record: the forward kernel alone
        return _forward(x)
    return _Softmax.apply(x)


AOT_SPECS = [
    (
        kernel,
        {**tensors, **strides, "C": "i32", "BLOCK_C": "constexpr"},
        {"BLOCK_C": block},
        {"num_warps": warps_for(block)},
    )
    for dtype in ("fp32", "bf16", "fp16")
    for block in (128, 1024, 4096)  # attention rows of up to 128 and 1024 keys; a vocabulary in blocks
    for kernel, tensors, strides in (
        (_softmax_forward_kernel, {"X": f"*{dtype}", "Y": f"*{dtype}"}, {"x_row_stride": "i32", "y_row_stride": "i32"}),
        (
            _softmax_backward_kernel,
            {"Y": f"*{dtype}", "DY": f"*{dtype}", "DX": f"*{dtype}"},
            {"y_row_stride": "i32", "dy_row_stride": "i32", "dx_row_stride": "i32"},
        ),
    )
]
"""(kernel, signature, constexprs, options) to compile ahead of time (triton.compiler.ASTSource, e.g. for sm_80
and sm_90): float32, bf16 and fp16 rows of up to 128 and 1024 entries in one block, and wider rows
(a GPT-2 vocabulary of 50304) 4096 at a time. Nothing is compiled at import."""


def attention_weights(q: Tensor, k: Tensor, causal: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) (B, H, Tq, Tk) by this module's softmax: the weights a `pattern` hook reads
    and may replace, which the fused attention (`attention.py`) never forms. Causal: query i sits at Tk - Tq + i."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if causal:
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return softmax(scores)
