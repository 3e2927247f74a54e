"""Cross-entropy of logits against integer targets as two fused Triton kernels, forward and backward.

For a row of V logits x with target t:
    lse = log sum_j exp(x_j),   loss_row = lse - x_t,   loss = mean of loss_row over the scored rows
(rows whose target is IGNORE_INDEX are not scored; no scored row gives 0/0 = nan, as PyTorch does). A target
outside [0, V) that is not ignored makes the loss and its row's gradient nan, where PyTorch raises: checking it on
the host would make every step wait for the GPU, and a nan loss stops a run.
Backward: d loss_row / dx_j = exp(x_j - lse) - [j == t] = softmax(x)_j - onehot(t)_j, so
    dlogits = (softmax(x) - onehot(t)) * dloss / n_scored   on scored rows, 0 on the others.

Why it is fast on a GPU:
- The forward reads each row of logits once and writes two floats per row (the row's loss and lse):
  one program per row walks V in blocks of BLOCK_V and keeps a running max m and a running sum
  s = sum exp(x - m) (online log-sum-exp: when the max grows to m', s is rescaled by exp(m - m')).
  Only one block of the row is in registers at a time, so any V works, and the (N, V) softmax that
  a naive loss writes and reads back (for GPT-2, 50304 floats a row) is never stored.
- The backward reads each row once more and writes its gradient once: the softmax is rebuilt block by
  block from the logits and the saved lse, the 1 subtracted at the target, the scale applied, all in
  registers. dloss / n_scored is read from device memory, so nothing waits for the host.
- The mean is a torch sum of the (N,) row losses: a fixed order, deterministic, no atomics.
- The maths is float32 for bf16 and fp16 logits (float64 for float64, how the kernels are verified);
  the loss is float32 for 16-bit logits (as the fast set's) and the gradient is in the logits' dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.kernels.triton.softmax import online_max_and_sum, warps_for
from gpt_core.reference import IGNORE_INDEX


@triton.jit
def _cross_entropy_forward_kernel(Logits, Targets, LossRows, Lse, row_stride, V, ignore_index, BLOCK_V: tl.constexpr):
    acc = tl.float64 if Logits.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    row = tl.program_id(0).to(tl.int64)
    logits = Logits + row * row_stride  # this row's logits
    m, s = online_max_and_sum(logits, V, BLOCK_V)  # the max and sum exp(x - max), one pass
    lse = m + tl.log(s)
    target = tl.load(Targets + row)
    scored = target != ignore_index
    known = (target >= 0) & (target < V)  # a target outside the vocabulary reads no memory and scores nan
    picked = tl.load(logits + tl.where(scored & known, target, 0)).to(acc)  # x_t (column 0 for the others)
    tl.store(LossRows + row, tl.where(scored, tl.where(known, lse - picked, float("nan")), 0.0))
    tl.store(Lse + row, lse)


@triton.jit
def _cross_entropy_backward_kernel(
    Logits, Targets, Lse, Scale, DLogits, row_stride, d_row_stride, V, ignore_index, BLOCK_V: tl.constexpr
):
    acc = tl.float64 if Logits.dtype.element_ty == tl.float64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(Targets + row)
    scored = target != ignore_index
    known = (target >= 0) & (target < V)
    scale = tl.where(known, tl.load(Scale).to(acc), float("nan"))  # dloss / n_scored; nan for an unknown target
    lse = tl.load(Lse + row)
    for start in range(0, V, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)  # (BLOCK_V,)
        mask = cols < V
        x = tl.load(Logits + row * row_stride + cols, mask=mask, other=0.0).to(acc)  # (BLOCK_V,)
        grad = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale  # (BLOCK_V,)
        grad = tl.where(scored, grad, 0.0)  # an ignored row: 0, even one of -inf logits (nan above)
        tl.store(DLogits + row * d_row_stride + cols, grad.to(DLogits.dtype.element_ty), mask=mask)


def _block_v(vocab: int) -> int:
    """Logits per block: the whole row when it is short, else 4096 at a time (16 KiB of float32)."""
    return min(triton.next_power_of_2(vocab), 4096)


def _forward(logits: Tensor, targets: Tensor, ignore_index: int) -> tuple[Tensor, Tensor, Tensor]:
    """The mean loss (float32, float64 for float64 logits), the lse (N,) and the logits as passed to the kernel."""
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()  # (N, V), unit column stride
    targets = targets.contiguous()  # (N,)
    n, vocab = logits.shape
    stats_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    loss_rows = torch.empty(n, dtype=stats_dtype, device=logits.device)  # (N,)
    lse = torch.empty_like(loss_rows)  # (N,)
    block = _block_v(vocab)
    _cross_entropy_forward_kernel[(n,)](
        logits, targets, loss_rows, lse, logits.stride(0), vocab, ignore_index,
        BLOCK_V=block, num_warps=warps_for(block),
    )  # fmt: skip
    n_scored = (targets != ignore_index).sum()  # stays on the device: 0 gives 0/0 = nan
    return loss_rows.sum() / n_scored, lse, logits


class _CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over the scored rows; the backward rebuilds the softmax from the saved lse."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
        loss, lse, rows = _forward(logits, targets, ignore_index)
        ctx.save_for_backward(rows, targets, lse)
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    @differentiates_once
    def backward(ctx, dloss: Tensor):
        logits, targets, lse = ctx.saved_tensors
        n, vocab = logits.shape
        scale = (dloss / (targets != ctx.ignore_index).sum()).to(lse.dtype)  # a 0-dim tensor, on the device
        dlogits = torch.empty((n, vocab), dtype=logits.dtype, device=logits.device)  # (N, V)
        block = _block_v(vocab)
        _cross_entropy_backward_kernel[(n,)](
            logits, targets.contiguous(), lse, scale, dlogits, logits.stride(0), dlogits.stride(0), vocab,
            ctx.ignore_index, BLOCK_V=block, num_warps=warps_for(block),
        )  # fmt: skip
        return dlogits, None, None


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Mean cross-entropy of `logits` (..., V) against integer `targets` (...), as fused Triton kernels.

    Positions whose target equals `ignore_index` are not scored and get zero gradient; if none is
    scored the mean is 0/0 = nan, as in PyTorch.
    """
    vocab = logits.shape[-1]
    logits, targets = logits.reshape(-1, vocab), targets.reshape(-1)
    if not (torch.is_grad_enabled() and logits.requires_grad):  # nothing to record: the forward kernel alone
        return _forward(logits, targets, ignore_index)[0]
    return _CrossEntropy.apply(logits, targets, ignore_index)


def _aot_specs() -> list[tuple]:
    specs = []
    for dtype in ("fp32", "bf16", "fp16"):
        for block in (128, 2048, 4096):  # a short vocabulary in one block; GPT-2's 50304 in blocks
            rows = {"Logits": f"*{dtype}", "Targets": "*i64", "Lse": "*fp32", "row_stride": "i32", "V": "i32"}
            rows |= {"ignore_index": "i32", "BLOCK_V": "constexpr"}
            consts, options = {"BLOCK_V": block}, {"num_warps": warps_for(block)}  # as launched
            specs.append((_cross_entropy_forward_kernel, {**rows, "LossRows": "*fp32"}, consts, options))
            backward = {**rows, "Scale": "*fp32", "DLogits": f"*{dtype}", "d_row_stride": "i32"}
            specs.append((_cross_entropy_backward_kernel, backward, consts, options))
    return specs


AOT_SPECS = _aot_specs()
"""(kernel, signature, constexprs, options) to compile ahead of time (triton.compiler.ASTSource, e.g. for sm_80
and sm_90): float32, bf16 and fp16 logits in blocks of 128 (V = 65 or 97) and of 2048 and 4096 (V = 50304).
Nothing is compiled at import."""
