"""Dropout as one elementwise Triton kernel, the same kernel forward and backward, its mask never stored.

    y  = x  * keep / (1 - p),   keep_i = (rand(seed, i) >= p),   i the element's flat index
    dx = dy * keep / (1 - p)

rand(seed, i) is Philox (`tl.rand`), a counter-based generator: the i-th number of a seed's stream is a function
of (seed, i) alone, computed in registers. So the backward regenerates the forward's mask from the seed instead of
reading a saved one, and it is the forward's kernel run on dy (as the attention kernel regenerates its dropout).

Why it is fast on a GPU: dropout written with tensor operations (`reference.dropout`) is four passes over memory:
draw uniform numbers (write 4 bytes an element), compare them with p (read 4, write 1), multiply (read 4 + 1, write
4), divide (read 4, write 4): 26 bytes an element in fp32, and a bool mask kept for the backward's two more passes
(17 bytes). PyTorch's own CUDA dropout is one kernel but still writes and keeps the mask (9 bytes each way). Here
each way reads 4 bytes and writes 4 in one kernel (the forward launches one more, to draw the seed), and the
backward keeps nothing but the one-element seed: for the 6-layer shakespeare_char model at batch 64, 13 masks of
64 x 256 x 384 bytes (78 MiB) that never exist.

The seed is a one-element tensor drawn on x's device by torch's generator there, which the kernel loads: so
`torch.manual_seed` makes the masks reproducible and drawing reads nothing back to the host. The counter i is a
32-bit integer: a tensor of more than 2^31 - 1,024 elements is refused. The maths is float32 for fp32, bf16 and
fp16 inputs (float64 for float64, how the kernel is verified); p is a compile-time constant, one compilation per
rate.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.reference import dropout as reference_dropout

BLOCK = 1024  # elements per program
MAX_ELEMENTS = 2**31 - BLOCK  # the last program's counters stay below 2^31


@triton.jit
def _dropout_kernel(X, Y, SEED, n, P: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.float64 if X.dtype.element_ty == tl.float64 else tl.float32  # the dtype of the maths
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # (BLOCK,) int32: each element's counter
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(acc)  # (BLOCK,)
    keep = (tl.rand(tl.load(SEED), offs) >= P).to(acc)  # (BLOCK,) 1 or 0, the same for the same (seed, i)
    tl.store(Y + offs, (x * keep / (1.0 - P)).to(Y.dtype.element_ty), mask=mask)


def _apply(x: Tensor, p: float, seed: Tensor) -> Tensor:
    """x * keep / (1 - p) for a contiguous x, keep drawn from `seed` (1,): one program per BLOCK elements."""
    y = torch.empty_like(x)  # contiguous, like x
    _dropout_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, seed, x.numel(), P=float(p), BLOCK=BLOCK)
    return y


class _Dropout(torch.autograd.Function):
    """y = x keep / (1 - p); dx = dy keep / (1 - p), keep regenerated from the seed."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float, seed: Tensor) -> Tensor:
        ctx.p = p
        ctx.save_for_backward(seed)
        return _apply(x, p, seed)

    @staticmethod
    @differentiates_once
    def backward(ctx, dy: Tensor) -> tuple[Tensor, None, None]:
        (seed,) = ctx.saved_tensors
        return _apply(dy.contiguous(), ctx.p, seed), None, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element with probability p and rescale the rest by 1/(1-p) (inverted dropout), in training. What
    draws nothing (evaluation, p = 0 or 1) and a p outside [0, 1] are `reference.dropout`'s to answer."""
    if not training or not 0.0 < p < 1.0:
        return reference_dropout(x, p, training)
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(f"the triton dropout counts elements in 32 bits: {x.numel()} is too many; use the fast set")
    x = x.contiguous()  # elementwise: any order of the elements works, but the kernel reads them flat
    seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int32, device=x.device)  # on the device: nothing read back
    if not (torch.is_grad_enabled() and x.requires_grad):  # nothing to record: the kernel alone
        return _apply(x, p, seed)
    return _Dropout.apply(x, p, seed)


AOT_SPECS = [
    (_dropout_kernel, {"X": f"*{dtype}", "Y": f"*{dtype}", "SEED": "*i32", "n": "i32", "P": "constexpr",
                       "BLOCK": "constexpr"}, {"P": 0.2, "BLOCK": BLOCK}, {})  # Triton's default warps and stages
    for dtype in ("fp32", "bf16", "fp16")
]  # fmt: skip
"""(kernel, signature, constexprs, options) to compile ahead of time (triton.compiler.ASTSource, e.g. for sm_80
and sm_90): float32, bf16 and fp16, BLOCK elements a program (any tensor size). Nothing is compiled at import."""
