"""FlashAttention-2 in Triton: fused causal attention, forward and backward, written by hand.

    S = q k^T / sqrt(d) (+ the causal mask),   P = softmax(S) (rows),   O = P v

The forward never forms the (Tq, Tk) matrices S or P. One program owns a block of BLOCK_M queries of
one (batch, head) and walks the keys in blocks of BLOCK_N, keeping per query row a running max m, a
running sum l and an unnormalised output accumulator acc (the *online softmax*):

    m_new = max(m, rowmax(S_blk))
    P_blk = exp(S_blk - m_new)                      (BLOCK_M, BLOCK_N), exact up to the row's 1/l
    alpha = exp(m - m_new)                          how far the old terms must shrink
    l     = alpha * l + rowsum(P_blk)
    acc   = alpha * acc + P_blk v_blk
    m     = m_new

and at the end O = acc / l, with the log-sum-exp L = m + log(l) written out for the backward. The
exponentials are base 2: exp(x) = exp2(x log2(e)), the factor log2(e) folded into the scale, so the
scores are s = q k^T scale log2(e) and L is kept in the same base-2 units (L2 = m + log2(l)).

The backward (FA2) recomputes P from q, k and the saved L instead of storing it,
P = exp2(s - L2) exactly normalised, and with dO the output's gradient uses

    delta = rowsum(dO * O)   (= rowsum(P * dP): one (Tq, d) product instead of a (Tq, Tk) one)
    dV = P^T dO,   dP = dO v^T,   dS = P * (dP - delta),   dQ = dS k / sqrt(d),   dK = dS^T q / sqrt(d)

in three kernels: `_bwd_preprocess` (delta), `_bwd_dkdv` (one program per key block, looping over the
query blocks that see it, accumulating dK and dV) and `_bwd_dq` (one program per query block, looping
over keys, accumulating dQ). Splitting dQ off costs a second recomputation of s and P but needs no
atomics, so the gradients are deterministic (and float64 works: there are no fp64 atomics to lean on).

Why it is fast: attention's cost is memory traffic, not arithmetic. Tiled, the T x T matrices never
exist in memory; each program reads its q block once, streams k and v blocks through shared memory
(num_stages-deep software pipelining overlaps the next block's load with this block's matmuls), and
keeps m, l, acc, the score tile and P in registers. HBM traffic is O(T d) per head instead of O(T^2),
and the backward pays for the missing P by recomputing it (cheap flops) rather than reading it.
Causal programs stop at the diagonal and skip fully masked key blocks; only the blocks that straddle
the diagonal or the sequence's end pay for masking (`_key_range`; the branch is uniform across a
program, so the blocks below it run mask-free).

Dropout on the attention weights (training): the mask is counter-based, keep = rand(seed, offset) >= p
from Philox (`tl.rand`), offset = ((batch * H + head) * Tq + query) * Tk + key, unique per weight, and
kept weights scaled by 1 / (1 - p). The backward regenerates the very same mask from the same seed, as
FlashAttention does, so nothing of size T x T is stored. `dropout_keep` materialises that mask with
the identical offsets, for checking the fused kernels against plain attention. l sums the weights
*before* dropout, so O = (P * keep / (1 - p)) v with P the true softmax; delta = rowsum(dO * O) still
equals rowsum(P * dP) for dP the gradient of P (dropout's scale included), so dS keeps its form.

Precision: accumulation, m, l, L and delta in float32 for fp32, bf16 and fp16 inputs, in float64 for
float64 inputs (the interpreter's verification path; tl.dot on fp64 also compiles for sm_80/sm_90, to
f64 mma, though unmeasured on hardware). The saved log-sum-exp (B, H, Tq) is float32 (float64 for
float64 inputs). P is rounded to the input dtype before P v, and dS before dS k and dS^T q, as every
16-bit flash kernel does. Float32 matmuls: `tl.dot` on fp32 defaults to TF32
(10-bit mantissa) on NVIDIA; this module follows PyTorch's own switch for matmuls instead:
`input_precision="ieee"` (exact fp32) unless `torch.backends.cuda.matmul.fp32_precision` is "tf32" (set by it,
by `torch.backends.fp32_precision`, `allow_tf32` or `set_float32_matmul_precision("high")`), which PyTorch
leaves off by default. The scale and the dropout probability are compile-time constants
(`SM_SCALE`, `DROPOUT_P`): a runtime Python float reaches a Triton kernel as float32, which would cost
float64 its precision; one compilation per head dim and per dropout rate.

Shapes in comments: (BLOCK_M, BLOCK_D) etc., BLOCK_D the head dim padded to a power of two (>= 16),
the padding masked on load. q, k, v may be strided views (of a fused qkv projection): their strides
are passed to the kernels, never copied. O, dQ, dK and dV are buffers of this module laid out (B, T, H, d),
as a (B, T, C) activation is: the model's `y.transpose(1, 2).reshape(B, T, C)` is then a view, not a copy, and
the gradients reach the qkv projection's (B, T, 3C) without one (unit stride along d; dO shares O's layout).
Head dims up to 128. `AOT_SPECS` lists every kernel's signature for compiling ahead of time (sm_80, sm_90)
from a CPU; compiled so, at `_TILES`' sizes, the largest takes 64 KiB of shared memory and none spills a
register.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from gpt_core.kernels.once import differentiates_once

_LOG2_E = tl.constexpr(1.4426950408889634)  # log2(e), readable inside the kernels
_NUM_STAGES = 2
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INTERPRETED = tl.constexpr(bool(triton.knobs.runtime.interpret))  # kernels run by the interpreter


# ---------------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _dropout(x, seed, bh, rows, cols, Tq, Tk, DROPOUT_P: tl.constexpr):
    """x * keep / (1 - p) for the weights at (rows, cols) of head bh (any broadcastable layout): the one
    place the Philox offsets are formed, shared by forward, backward and `dropout_keep`."""
    offsets = (bh.to(tl.int64) * Tq + rows) * Tk + cols  # int64: unique for every (head, query, key)
    keep = tl.rand(seed, offsets) >= DROPOUT_P  # rand is float32 in [0, 1)
    scale: tl.constexpr = 1.0 / (1.0 - DROPOUT_P) if DROPOUT_P < 1.0 else 0.0  # p = 1: all dropped, no 1/0
    return tl.where(keep, x * scale, 0.0)  # x * scale: the constant takes x's dtype (exact in float64)


@triton.jit
def _operand(x):
    """x as a tl.dot operand. Triton's interpreter would multiply bf16 as its raw uint16 bits (numpy has no
    bfloat16), so there bf16 is widened to fp32 first: exact, and what a bf16 MMA computes anyway (exact
    products, fp32 accumulation). Compiled, x is untouched."""
    if _INTERPRETED and x.dtype == tl.bfloat16:
        return x.to(tl.float32)
    return x


@triton.jit
def _dot(a, b, acc_dtype: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b, accumulated in acc_dtype."""
    return tl.dot(_operand(a), _operand(b), out_dtype=acc_dtype, input_precision=PRECISION)


@triton.jit
def _dot_acc(a, b, acc, PRECISION: tl.constexpr):
    """acc + a @ b, the sum kept in the matmul's accumulator."""
    return tl.dot(_operand(a), _operand(b), acc, out_dtype=acc.dtype, input_precision=PRECISION)


@triton.jit
def _visible(offs_m, offs_n, Tq, Tk, CAUSAL: tl.constexpr):
    """(len(offs_m), len(offs_n)) mask: key in range and, if causal, at or before the query's position
    Tk - Tq + i (queries aligned to the end of the keys: the KV-cache layout)."""
    ok = offs_n[None, :] < Tk
    if CAUSAL:
        ok = ok & (offs_n[None, :] <= offs_m[:, None] + (Tk - Tq))
    return ok


@triton.jit
def _key_range(start_m, Tq, Tk, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The keys a query block [start_m, start_m + BLOCK_M) walks: (full_end, hi). Blocks below full_end are
    seen whole by every row (no mask); the ones in [full_end, hi) straddle the diagonal or the end of the
    keys (masked); the keys from hi on are seen by no row (skipped)."""
    if CAUSAL:  # the first row sees keys < Tk - Tq + start_m + 1, the last < Tk - Tq + start_m + BLOCK_M
        full_end = tl.minimum(Tk - Tq + start_m + 1, Tk) // BLOCK_N * BLOCK_N
        hi = tl.minimum(Tk - Tq + start_m + BLOCK_M, Tk)
    else:
        full_end = Tk // BLOCK_N * BLOCK_N
        hi = Tk
    return full_end, hi


# ---------------------------------------------------------------------------------------------------
# Forward
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _program(T, BLOCK: tl.constexpr):
    """This program's block start along T and its (batch, head) index bh, from a 1-D grid of cdiv(T, BLOCK) * B * H
    programs: a 2-D grid's second axis, where B * H would go, stops at 65,535 on CUDA. One head's blocks are
    neighbours in the grid, so they run together and share its K and V in the L2 cache."""
    blocks = tl.cdiv(T, BLOCK)
    return (tl.program_id(0) % blocks) * BLOCK, tl.program_id(0) // blocks


@triton.jit
def _attn_fwd(Q, K, V, Out, LSE, seed,
              stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_om, H, Tq, Tk,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
              CAUSAL: tl.constexpr, DROPOUT_P: tl.constexpr, SM_SCALE: tl.constexpr,
              PRECISION: tl.constexpr):  # fmt: skip
    """Grid (cdiv(Tq, BLOCK_M) * B * H,): O and the base-2 log-sum-exp L2 of one block of queries."""
    acc_dtype = LSE.dtype.element_ty  # float32, or float64 for float64 inputs
    qk_scale: tl.constexpr = SM_SCALE * _LOG2_E  # scale * log2(e): scores in base 2
    start_m, bh = _program(Tq, BLOCK_M)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < Tq) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), acc_dtype)  # running max of the scores, per row
    l_i = tl.zeros([BLOCK_M], acc_dtype)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], acc_dtype)  # running sum of exp2(s - m_i) v, unnormalised
    full_end, hi = _key_range(start_m, Tq, Tk, BLOCK_M, BLOCK_N, CAUSAL)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < HEAD_DIM)
        k = tl.load(K + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(V + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _dot(q, tl.trans(k), acc_dtype, PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        if start_n >= full_end:  # a block on the diagonal or past the keys' end (a branch uniform per program)
            s = tl.where(_visible(offs_m, offs_n, Tq, Tk, CAUSAL), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # (BLOCK_M,) finite: every row sees key 0, in the first block
        p = tl.exp2(s - m_new[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp2(m_i - m_new)  # (BLOCK_M,) the old terms' shrink factor; exp2(-inf) = 0 at first
        l_i = l_i * alpha + tl.sum(p, 1)  # l sums the weights before dropout
        if DROPOUT_P > 0.0:
            p = _dropout(p, seed, bh, offs_m[:, None], offs_n[None, :], Tq, Tk, DROPOUT_P)
        acc = _dot_acc(p.to(v.dtype), v, acc * alpha[:, None], PRECISION)  # rescale, then add P v
        m_i = m_new
    out = acc / l_i[:, None]  # (BLOCK_M, BLOCK_D)
    Out += b * stride_ob + h * stride_oh
    tl.store(Out + offs_m[:, None] * stride_om + offs_d[None, :], out.to(Out.dtype.element_ty), mask=q_mask)
    tl.store(LSE + bh.to(tl.int64) * Tq + offs_m, m_i + tl.log2(l_i), mask=offs_m < Tq)


# ---------------------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _bwd_preprocess(Out, DO, DELTA, stride_ob, stride_oh, stride_om, H, Tq,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Grid (cdiv(Tq, BLOCK_M) * B * H,): delta = rowsum(dO * O), O and dO in one contiguous layout."""
    start_m, bh = _program(Tq, BLOCK_M)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offset = (bh // H).to(tl.int64) * stride_ob + (bh % H).to(tl.int64) * stride_oh
    ptrs = offset + offs_m[:, None] * stride_om + offs_d[None, :]
    mask = (offs_m[:, None] < Tq) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(Out + ptrs, mask=mask, other=0.0).to(DELTA.dtype.element_ty)  # (BLOCK_M, BLOCK_D)
    do = tl.load(DO + ptrs, mask=mask, other=0.0).to(DELTA.dtype.element_ty)
    tl.store(DELTA + bh.to(tl.int64) * Tq + offs_m, tl.sum(o * do, 1), mask=offs_m < Tq)


@triton.jit
def _bwd_dkdv(Q, K, V, DO, DK, DV, LSE, DELTA, seed,
              stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_om,
              stride_dkb, stride_dkh, stride_dkn, H, Tq, Tk,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
              CAUSAL: tl.constexpr, DROPOUT_P: tl.constexpr, SM_SCALE: tl.constexpr,
              PRECISION: tl.constexpr):  # fmt: skip
    """Grid (cdiv(Tk, BLOCK_N) * B * H,): dK and dV of one key block, from the query blocks that see it, in
    key-major layout (P^T, dP^T, dS^T are (BLOCK_N, BLOCK_M)). DO shares O's strides, DV shares DK's.
    Query rows past Tq load as zeros (dO = 0, delta = 0) and so add exactly nothing, masked or not."""
    acc_dtype = LSE.dtype.element_ty
    qk_scale: tl.constexpr = SM_SCALE * _LOG2_E
    start_n, bh = _program(Tk, BLOCK_N)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    DO += b * stride_ob + h * stride_oh
    LSE += bh.to(tl.int64) * Tq
    DELTA += bh.to(tl.int64) * Tq
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < HEAD_DIM)
    k = tl.load(K + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
    v = tl.load(V + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
    # k, v: (BLOCK_N, BLOCK_D), held in registers for the whole loop over queries
    dk = tl.zeros([BLOCK_N, BLOCK_D], acc_dtype)
    dv = tl.zeros([BLOCK_N, BLOCK_D], acc_dtype)
    if CAUSAL:  # query i sees key j iff i >= j - (Tk - Tq): start at the first query block that sees the block
        lo = tl.maximum(start_n - (Tk - Tq), 0) // BLOCK_M * BLOCK_M
        full_start = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - (Tk - Tq), 0), BLOCK_M) * BLOCK_M  # rows seeing all
    else:
        lo = 0
        full_start = 0
    for start_m in range(lo, Tq, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q_mask = (offs_m[:, None] < Tq) & (offs_d[None, :] < HEAD_DIM)
        q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)
        do = tl.load(DO + offs_m[:, None] * stride_om + offs_d[None, :], mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
        lse = tl.load(LSE + offs_m, mask=offs_m < Tq, other=0.0)  # (BLOCK_M,)
        delta = tl.load(DELTA + offs_m, mask=offs_m < Tq, other=0.0)
        s_t = _dot(k, tl.trans(q), acc_dtype, PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
        p_t = tl.exp2(s_t - lse[None, :])  # P^T, recomputed from the saved log-sum-exp
        if start_m < full_start:  # a block straddling the diagonal
            p_t = tl.where(tl.trans(_visible(offs_m, offs_n, Tq, Tk, CAUSAL)), p_t, 0.0)
        dp_t = _dot(v, tl.trans(do), acc_dtype, PRECISION)  # (BLOCK_N, BLOCK_M)
        if DROPOUT_P > 0.0:  # one draw serves P^T and dP^T
            ones = tl.full([BLOCK_N, BLOCK_M], 1.0, acc_dtype)
            drop = _dropout(ones, seed, bh, offs_m[None, :], offs_n[:, None], Tq, Tk, DROPOUT_P)  # keep / (1 - p)
            dv = _dot_acc((p_t * drop).to(do.dtype), do, dv, PRECISION)
            dp_t = dp_t * drop
        else:
            dv = _dot_acc(p_t.to(do.dtype), do, dv, PRECISION)  # dV += P^T dO
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T, the gradient of the (natural-log) scores
        dk = _dot_acc(ds_t.to(q.dtype), q, dk, PRECISION)  # dK += dS^T q
    out = b * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :]
    tl.store(DK + out, (dk * SM_SCALE).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dq(Q, K, V, DO, DQ, LSE, DELTA, seed,
            stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
            stride_vb, stride_vh, stride_vn, stride_vd, stride_ob, stride_oh, stride_om, H, Tq, Tk,
            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
            CAUSAL: tl.constexpr, DROPOUT_P: tl.constexpr, SM_SCALE: tl.constexpr,
            PRECISION: tl.constexpr):  # fmt: skip
    """Grid (cdiv(Tq, BLOCK_M) * B * H,): dQ of one query block over the forward's keys. DO and DQ share O's
    strides."""
    acc_dtype = LSE.dtype.element_ty
    qk_scale: tl.constexpr = SM_SCALE * _LOG2_E
    start_m, bh = _program(Tq, BLOCK_M)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h * stride_kh
    V += b * stride_vb + h * stride_vh
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q_mask = (offs_m[:, None] < Tq) & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)
    o_ptrs = b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    do = tl.load(DO + o_ptrs, mask=q_mask, other=0.0)  # (BLOCK_M, BLOCK_D)
    lse = tl.load(LSE + bh.to(tl.int64) * Tq + offs_m, mask=offs_m < Tq, other=0.0)  # (BLOCK_M,)
    delta = tl.load(DELTA + bh.to(tl.int64) * Tq + offs_m, mask=offs_m < Tq, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], acc_dtype)
    full_end, hi = _key_range(start_m, Tq, Tk, BLOCK_M, BLOCK_N, CAUSAL)
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[:, None] < Tk) & (offs_d[None, :] < HEAD_DIM)
        k = tl.load(K + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v = tl.load(V + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
        s = _dot(q, tl.trans(k), acc_dtype, PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        p = tl.exp2(s - lse[:, None])  # P, recomputed
        if start_n >= full_end:
            p = tl.where(_visible(offs_m, offs_n, Tq, Tk, CAUSAL), p, 0.0)
        dp = _dot(do, tl.trans(v), acc_dtype, PRECISION)  # (BLOCK_M, BLOCK_N)
        if DROPOUT_P > 0.0:
            dp = _dropout(dp, seed, bh, offs_m[:, None], offs_n[None, :], Tq, Tk, DROPOUT_P)
        ds = p * (dp - delta[:, None])
        dq = _dot_acc(ds.to(k.dtype), k, dq, PRECISION)  # dQ += dS k
    tl.store(DQ + o_ptrs, (dq * SM_SCALE).to(DQ.dtype.element_ty), mask=q_mask)


# ---------------------------------------------------------------------------------------------------
# The dropout mask, materialised (for verification)
# ---------------------------------------------------------------------------------------------------


@triton.jit
def _dropout_keep_kernel(KEEP, seed, Tq, Tk, DROPOUT_P: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (B * H, cdiv(Tq, BLOCK_M), cdiv(Tk, BLOCK_N)): KEEP (B, H, Tq, Tk) uint8, 1 where kept."""
    bh = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    ones = tl.full([BLOCK_M, BLOCK_N], 1.0, tl.float32)
    kept = _dropout(ones, seed, bh, offs_m[:, None], offs_n[None, :], Tq, Tk, DROPOUT_P) != 0.0
    mask = (offs_m[:, None] < Tq) & (offs_n[None, :] < Tk)
    tl.store(KEEP + (bh.to(tl.int64) * Tq + offs_m[:, None]) * Tk + offs_n[None, :], kept.to(tl.uint8), mask=mask)


def dropout_keep(seed: int, B: int, H: int, Tq: int, Tk: int, p: float, device: torch.device | str) -> Tensor:
    """The boolean keep mask (B, H, Tq, Tk) that the fused kernels draw for this seed and p."""
    keep = torch.empty((B, H, Tq, Tk), dtype=torch.uint8, device=device)
    grid = (B * H, triton.cdiv(Tq, 32), triton.cdiv(Tk, 32))
    _dropout_keep_kernel[grid](keep, seed, Tq, Tk, DROPOUT_P=float(p), BLOCK_M=32, BLOCK_N=32)
    return keep.bool()


# ---------------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------------


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


# (BLOCK_M, BLOCK_N, num_warps) by the dot's inputs and BLOCK_D: tiles whose three kernels compile for sm_80 and
# sm_90 without spilling a register, with each Triton `nox -s triton` builds with, whichever of the JIT's
# alignment hints a launch gets (test_triton_ahead_of_time.py compiles each from a CPU and asks ptxas). A spill
# sends a thread's values through local memory inside the loop over blocks. Exact fp32 (no tensor cores;
# evaluation's, and training's without tf32) holds the most per thread and takes the smallest tiles. Chosen by
# compiling, not timed on a GPU.
# Fewer queries than BLOCK_M (decoding) launch these tiles too, the rows past the last query masked: smaller tiles,
# tried for them, spilled with one Triton version or another.
_TILES = {
    "16-bit": {16: (64, 64, 8), 32: (32, 64, 8), 64: (64, 32, 8), 128: (64, 16, 8)},
    "tf32": {16: (64, 64, 8), 32: (32, 16, 8), 64: (64, 16, 8), 128: (32, 16, 8)},
    "ieee": {16: (16, 16, 8), 32: (16, 16, 4), 64: (16, 16, 4), 128: (16, 16, 8)},
    "fp64": {16: (64, 64, 4), 32: (64, 32, 4), 64: (32, 32, 4), 128: (32, 16, 4)},  # verification only: not tuned
}


def _tiles(dtype: torch.dtype, head_dim: int, precision: str) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) from `_TILES` for q's dtype, its head dim and the dot's precision."""
    inputs = "16-bit" if dtype.itemsize == 2 else "fp64" if dtype == torch.float64 else precision
    return _TILES[inputs][_block_d(head_dim)]


def _precision(dtype: torch.dtype) -> str:
    """`tl.dot`'s input precision: exact fp32 unless PyTorch's matmuls may use TF32."""
    return "tf32" if dtype == torch.float32 and _tf32_allowed() else "ieee"


@torch.compiler.assume_constant_result  # read once as the compiler traces: the switch is no tensor to put in a graph
def _tf32_allowed() -> bool:
    return torch.backends.cuda.matmul.fp32_precision == "tf32"  # however it was set


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _launch_meta(q: Tensor, causal: bool, dropout_p: float, blocks: tuple[int, int] | None) -> dict:
    head_dim = q.shape[-1]
    precision = _precision(q.dtype)
    block_m, block_n, num_warps = _tiles(q.dtype, head_dim, precision)
    block_m, block_n = blocks or (block_m, block_n)  # fewer queries than BLOCK_M (decoding): the rest masked
    return dict(
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=_block_d(head_dim),
        CAUSAL=causal,
        DROPOUT_P=float(dropout_p),
        SM_SCALE=1.0 / math.sqrt(head_dim),
        PRECISION=precision,
        num_warps=num_warps,
        num_stages=_NUM_STAGES,
    )


def _heads_last(B: int, H: int, T: int, d: int, like: Tensor) -> Tensor:
    """An empty (B, H, T, d) laid out as (B, T, H, d)."""
    return torch.empty((B, T, H, d), dtype=like.dtype, device=like.device).transpose(1, 2)


def _forward(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, dropout_p: float, seed: int, blocks: tuple[int, int] | None
) -> tuple[Tensor, Tensor]:
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    meta = _launch_meta(q, causal, dropout_p, blocks)
    out = _heads_last(B, H, Tq, d, q)  # (B, H, Tq, d)
    lse = torch.empty((B, H, Tq), dtype=_acc_dtype(q.dtype), device=q.device)
    grid = (triton.cdiv(Tq, meta["BLOCK_M"]) * B * H,)
    _attn_fwd[grid](
        q, k, v, out, lse, seed, *q.stride(), *k.stride(), *v.stride(), *out.stride()[:3], H, Tq, Tk, **meta
    )
    return out, lse


def _backward(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    causal: bool,
    dropout_p: float,
    seed: int,
    blocks: tuple[int, int] | None,
) -> tuple[Tensor, Tensor, Tensor]:
    B, H, Tq, d = q.shape
    Tk = k.shape[2]
    meta = _launch_meta(q, causal, dropout_p, blocks)
    if d_out.stride() != out.stride():  # the model's gradient arrives in O's layout already
        d_out = torch.empty_like(out).copy_(d_out)
    delta = torch.empty_like(lse)
    dq = torch.empty_like(out)  # O's layout, as the kernel stores it
    dk, dv = _heads_last(B, H, Tk, d, k), _heads_last(B, H, Tk, d, v)
    o_strides = out.stride()[:3]
    _bwd_preprocess[(triton.cdiv(Tq, meta["BLOCK_M"]) * B * H,)](
        out, d_out, delta, *o_strides, H, Tq, HEAD_DIM=d, BLOCK_M=meta["BLOCK_M"], BLOCK_D=meta["BLOCK_D"],
        num_warps=meta["num_warps"], num_stages=meta["num_stages"],
    )  # fmt: skip
    strides = (*q.stride(), *k.stride(), *v.stride(), *o_strides)
    _bwd_dkdv[(triton.cdiv(Tk, meta["BLOCK_N"]) * B * H,)](
        q, k, v, d_out, dk, dv, lse, delta, seed, *strides, *dk.stride()[:3], H, Tq, Tk, **meta
    )
    _bwd_dq[(triton.cdiv(Tq, meta["BLOCK_M"]) * B * H,)](
        q, k, v, d_out, dq, lse, delta, seed, *strides, H, Tq, Tk, **meta
    )
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal: bool, dropout_p: float, seed: int, blocks):
        out, lse = _forward(q, k, v, causal, dropout_p, seed, blocks)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.dropout_p, ctx.seed, ctx.blocks = causal, dropout_p, seed, blocks
        return out

    @staticmethod
    @differentiates_once
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = _backward(d_out, q, k, v, out, lse, ctx.causal, ctx.dropout_p, ctx.seed, ctx.blocks)
        return dq, dk, dv, None, None, None, None


# The seed's draw is an operator of its own, so that torch.compile keeps it in its graph as a call (the seeds eager
# draws) where the `.item()` would break the graph, or, captured, be compiled into a CPU kernel of the compiler's own.
# Marked random, it is never constant-folded; the compiler may merge two calls on one tensor, and each attention
# passes its own q. torch.library.define takes the tag in every torch this package supports.
torch.library.define("gpt_core::attention_dropout_seed", "(Tensor q) -> SymInt",
                     tags=(torch.Tag.nondeterministic_seeded,))  # fmt: skip


@torch.library.impl("gpt_core::attention_dropout_seed", "CompositeExplicitAutograd")
def _draw(q: Tensor) -> int:
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


@torch.library.register_fake("gpt_core::attention_dropout_seed")
def _drawn_when_run(q: Tensor):
    return torch.library.get_ctx().new_dynamic_size(min=0, max=2**31 - 2)  # a graph value, unknown when traced


def draw_seed(q: Tensor) -> int:
    """A dropout seed for the kernels attending with `q` (nothing of it is read: it files the call under q's
    device), from torch's default (CPU) generator: `torch.manual_seed` makes it reproducible, and drawing on the CPU
    costs no device synchronisation."""
    return torch.ops.gpt_core.attention_dropout_seed(q)


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = True,
    dropout_p: float = 0.0,
    seed: int | None = None,
    blocks: tuple[int, int] | None = None,
) -> Tensor:
    """`attention` with the dropout seed (drawn by `draw_seed` when None) and, for tests, the
    (BLOCK_M, BLOCK_N) block sizes (powers of two >= 16) exposed."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, T, d), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _DTYPES:
        raise TypeError(f"q, k, v must share one of fp16, bf16, fp32, fp64; got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, Tq, d = q.shape
    if k.shape != v.shape or k.shape[:2] != (B, H) or k.shape[3] != d:
        raise ValueError(
            f"k, v must be (B, H, Tk, d) matching q {tuple(q.shape)}, got {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if causal and Tq > k.shape[2]:
        raise ValueError(f"causal attention needs no more queries than keys, got {Tq} > {k.shape[2]}")
    if k.shape[2] == 0 or not 1 <= d <= 128:  # larger heads: block sizes not chosen nor compiled for them
        raise ValueError(f"need at least one key and a head dim from 1 to 128, got Tk={k.shape[2]}, d={d}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p}")
    if dropout_p > 0.0 and seed is None:
        seed = draw_seed(q)
    seed = 0 if seed is None else seed
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _FlashAttention.apply(q, k, v, causal, dropout_p, seed, blocks)
    return _forward(q, k, v, causal, dropout_p, seed, blocks)[0]  # no graph: the forward alone


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = True, dropout_p: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v by the FlashAttention-2 kernels: the `attention` slot of
    `gpt_core.Kernels`. q (B, H, Tq, d), k and v (B, H, Tk, d); causal queries sit at the end of the keys
    (query i at position Tk - Tq + i). `dropout_p` drops attention weights inside the kernels, its seed
    drawn from torch's generator."""
    return flash_attention(q, k, v, causal, dropout_p)


# ---------------------------------------------------------------------------------------------------
# Ahead-of-time compilation specs: (kernel, signature, constexprs) for triton.compile(ASTSource(...))
# ---------------------------------------------------------------------------------------------------


def _signature(kernel, pointers: dict[str, str], constexprs: dict[str, object]) -> dict[str, str]:
    """`kernel`'s ASTSource signature: the named pointer types, "constexpr" for the constants, i32 else."""
    return {name: "constexpr" if name in constexprs else pointers.get(name, "i32") for name in kernel.arg_names}


def _aot_specs() -> list[tuple[object, dict[str, str], dict[str, object], dict[str, int]]]:
    """Every kernel for each dot precision (fp32 exact and TF32, bf16, fp16) at head dims 16, 32, 64 and 128 with the
    tiles and warps `_tiles` picks, in its fullest variant (causal, with dropout: without either, the code is a
    subset on the same tiles); d strides fixed at 1, as the JIT specialises a contiguous last axis."""
    specs = []
    inputs = [(torch.float32, "*fp32", "ieee"), (torch.float32, "*fp32", "tf32")]
    inputs += [(torch.bfloat16, "*bf16", "ieee"), (torch.float16, "*fp16", "ieee")]
    for dtype, ty, precision in inputs:
        tensors = {name: ty for name in ("Q", "K", "V", "Out", "DO", "DQ", "DK", "DV")}
        pointers = {**tensors, "LSE": "*fp32", "DELTA": "*fp32"}
        for head_dim in (16, 32, 64, 128):
            block_m, block_n, num_warps = _tiles(dtype, head_dim, precision)
            options = {"num_warps": num_warps, "num_stages": _NUM_STAGES}
            shape = dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_D=_block_d(head_dim))
            preprocess = (_bwd_preprocess, _signature(_bwd_preprocess, pointers, shape), shape, options)
            if preprocess not in specs:  # no dot in it: fp32's tiles for exact and TF32 products may be the same
                specs.append(preprocess)
            consts = dict(shape, BLOCK_N=block_n, CAUSAL=True, DROPOUT_P=0.1, SM_SCALE=1.0 / math.sqrt(head_dim))
            consts.update(PRECISION=precision, stride_qd=1, stride_kd=1, stride_vd=1)
            for kernel in (_attn_fwd, _bwd_dkdv, _bwd_dq):
                specs.append((kernel, _signature(kernel, pointers, consts), consts, options))
    keep = dict(DROPOUT_P=0.1, BLOCK_M=32, BLOCK_N=32)
    specs.append((_dropout_keep_kernel, _signature(_dropout_keep_kernel, {"KEEP": "*u8"}, keep), keep, {}))
    return specs


AOT_SPECS = _aot_specs()
"""(kernel, signature, constexprs, options) for `triton.compile(ASTSource(fn=kernel, signature=...,
constexprs=...), target=GPUTarget("cuda", 80 or 90, 32), options=options)`: every @triton.jit kernel of this
module at the warps and pipeline stages it launches with, nothing compiled at import."""
