"""LayerNorm over the last dimension as two Triton kernels: the forward and a hand-derived backward.

Forward, for each row x of C features:
    mean = sum(x) / C,   var = sum((x - mean)^2) / C   (biased),   rstd = 1 / sqrt(var + eps)
    xhat = (x - mean) * rstd,   y = xhat * weight + bias
Backward, with g = dy * weight the gradient reaching xhat. Since d mean / dx_i = 1/C and
d rstd / dx_i = -rstd^3 (x_i - mean) / C, d xhat_j / dx_i = rstd (delta_ij - 1/C - xhat_i xhat_j / C), so
    dx      = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dweight = sum over rows of dy * xhat,   dbias = sum over rows of dy

Why it is fast on a GPU:
- Forward: one program per row. The row is read from memory once into registers (BLOCK_C, the width
  rounded up to a power of two: 1024 for GPT-2's 768); the mean and the variance are two reductions
  over those registers, and y is written once. Besides y only the mean and rstd of each row are stored
  (two floats a row): no (N, C) xhat is kept; the backward recomputes it from x in a few flops, which
  is cheaper than writing and re-reading it.
- Backward: each row is one pass, reading x and dy once and writing dx once; both row means are
  reductions over registers. The weight and bias gradients are sums over all N rows: each program
  walks its own contiguous group of rows, accumulates dy * xhat and dy in registers, and writes one row
  of a (n_programs, C) float32 buffer; torch sums those few hundred rows afterwards. No atomics, so
  the order of every addition is fixed and the gradients are bit-for-bit the same on every run.
- Statistics and gradients are computed in float32 for 16-bit inputs (float64 for float64 inputs, which
  is how the kernels are verified); only the loads and stores are in the tensors' own dtypes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.kernels.triton.softmax import rows_of, warps_for


@triton.jit
def _layer_norm_forward_kernel(
    X, W, B, Y, Mean, Rstd, x_row_stride, y_row_stride, C,
    EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_C)  # (BLOCK_C,)
    mask = cols < C
    x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
    mean = tl.sum(x, axis=0) / C
    centred = tl.where(mask, x - mean, 0.0)  # (BLOCK_C,), zero past C so the padding adds nothing
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / C + EPS)
    y = centred * rstd * tl.load(W + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
    if HAS_BIAS:
        y += tl.load(B + cols, mask=mask, other=0.0).to(acc)
    tl.store(Y + row * y_row_stride + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@triton.jit
def _layer_norm_backward_kernel(
    X, W, DY, DX, Mean, Rstd, DW_partial, DB_partial, x_row_stride, dy_row_stride, dx_row_stride,
    N, C, rows_per_program, HAS_BIAS: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32
    program = tl.program_id(0)
    cols = tl.arange(0, BLOCK_C)  # (BLOCK_C,)
    mask = cols < C
    w = tl.load(W + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,), read once for all the rows
    dw = tl.zeros((BLOCK_C,), dtype=acc)  # this program's partial sums, kept in registers
    db = tl.zeros((BLOCK_C,), dtype=acc)
    first = program.to(tl.int64) * rows_per_program  # int64 rows, so 64-bit offsets: N * C may pass 2^31
    for row in range(first, tl.minimum(first + rows_per_program, N)):
        x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
        dy = tl.load(DY + row * dy_row_stride + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_C,)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(mask, (x - tl.load(Mean + row)) * rstd, 0.0)  # (BLOCK_C,), recomputed
        g = dy * w  # (BLOCK_C,), the gradient reaching xhat
        mean_g = tl.sum(g, axis=0) / C
        mean_g_xhat = tl.sum(g * xhat, axis=0) / C
        dx = rstd * (g - mean_g - xhat * mean_g_xhat)  # (BLOCK_C,)
        tl.store(DX + row * dx_row_stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(DW_partial + program * C + cols, dw, mask=mask)
    if HAS_BIAS:
        tl.store(DB_partial + program * C + cols, db, mask=mask)


def _stats_dtype(x: Tensor) -> torch.dtype:
    """The dtype of mean, rstd and the partial sums: float32, or float64 for float64 inputs."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _forward(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """y in x's shape and dtype, and what the backward needs: x as (N, C) rows, mean and rstd (N,)."""
    width = x.shape[-1]
    rows = rows_of(x, width)  # (N, C)
    n = rows.shape[0]
    y = torch.empty((n, width), dtype=x.dtype, device=x.device)  # (N, C)
    mean = torch.empty(n, dtype=_stats_dtype(x), device=x.device)  # (N,)
    rstd = torch.empty_like(mean)  # (N,)
    block = triton.next_power_of_2(width)
    weight = weight.contiguous()
    has_bias = bias is not None
    bias = bias.contiguous() if has_bias else weight  # never read without a bias
    # eps is a constexpr: exact in float64, where a float argument would be passed as float32
    _layer_norm_forward_kernel[(n,)](
        rows, weight, bias, y, mean, rstd, rows.stride(0), y.stride(0), width,
        EPS=eps, HAS_BIAS=has_bias, BLOCK_C=block, num_warps=warps_for(block),
    )  # fmt: skip
    return y.view(x.shape), rows, mean, rstd


def _n_programs(device: torch.device) -> int:
    """Programs of the backward: a few per streaming multiprocessor (a handful in the interpreter)."""
    if device.type == "cuda":
        return 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return 4


class _LayerNorm(torch.autograd.Function):
    """y = (x - mean) * rstd * weight + bias over the last dimension; backward in one pass per row."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
        y, rows, mean, rstd = _forward(x, weight, bias, eps)
        ctx.save_for_backward(rows, weight, mean, rstd)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @differentiates_once
    def backward(ctx, dy: Tensor):
        rows, weight, mean, rstd = ctx.saved_tensors
        n, width = rows.shape
        dy_rows = rows_of(dy, width)  # (N, C)
        dx = torch.empty_like(rows)  # (N, C), contiguous
        # at least one row a program: no rows (a batch of 0) launch no program, and the partial sums are empty
        rows_per_program = max(triton.cdiv(n, _n_programs(rows.device)), 1)
        n_programs = triton.cdiv(n, rows_per_program)
        dw_partial = torch.empty((n_programs, width), dtype=mean.dtype, device=rows.device)  # (n_programs, C)
        db_partial = torch.empty_like(dw_partial) if ctx.has_bias else dw_partial
        block = triton.next_power_of_2(width)
        _layer_norm_backward_kernel[(n_programs,)](
            rows, weight.contiguous(), dy_rows, dx, mean, rstd, dw_partial, db_partial,
            rows.stride(0), dy_rows.stride(0), dx.stride(0), n, width, rows_per_program,
            HAS_BIAS=ctx.has_bias, BLOCK_C=block, num_warps=warps_for(block),
        )  # fmt: skip
        dweight = dw_partial.sum(dim=0).to(weight.dtype)  # (C,), a fixed order: deterministic
        dbias = db_partial.sum(dim=0).to(weight.dtype) if ctx.has_bias else None
        return dx.view(dy.shape), dweight, dbias, None


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the last dimension of x (any leading shape), as Triton kernels."""
    needs_grad = x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    if not (torch.is_grad_enabled() and needs_grad):  # nothing to record: the forward kernel alone
        return _forward(x, weight, bias, eps)[0]
    return _LayerNorm.apply(x, weight, bias, eps)


def _aot_specs() -> list[tuple]:
    specs = []
    for dtype in ("fp32", "bf16", "fp16"):
        for width in (384, 768):  # GPT-2 small's width, and a narrower one
            rows = {"X": f"*{dtype}", "W": f"*{dtype}", "Mean": "*fp32", "Rstd": "*fp32", "C": "i32"}
            flags = {"HAS_BIAS": "constexpr", "BLOCK_C": "constexpr"}
            consts = {"HAS_BIAS": True, "BLOCK_C": triton.next_power_of_2(width)}
            options = {"num_warps": warps_for(consts["BLOCK_C"])}  # as launched
            forward = {**rows, "B": f"*{dtype}", "Y": f"*{dtype}", "x_row_stride": "i32", "y_row_stride": "i32"}
            forward |= {**flags, "EPS": "constexpr"}
            specs.append((_layer_norm_forward_kernel, forward, {**consts, "EPS": 1e-5}, options))
            backward = {**rows, "DY": f"*{dtype}", "DX": f"*{dtype}", "DW_partial": "*fp32", "DB_partial": "*fp32"}
            backward |= {"x_row_stride": "i32", "dy_row_stride": "i32", "dx_row_stride": "i32", "N": "i32"}
            specs.append(
                (_layer_norm_backward_kernel, {**backward, "rows_per_program": "i32", **flags}, consts, options)
            )
    return specs


AOT_SPECS = _aot_specs()
"""(kernel, signature, constexprs, options) to compile ahead of time (triton.compiler.ASTSource, e.g. for sm_80
and sm_90): float32, bf16 and fp16 rows of 384 and 768 features. Nothing is compiled at import."""
