"""The FlashAttention-2 Triton kernels (gpt_core/kernels/triton/attention.py) against PyTorch's attention.

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set here before Triton is
imported), which executes the same kernel code on CPU tensors, float64 included: float64 pins the maths to
1e-12, forward and backward, at the edge shapes (odd lengths, lengths off the block grid, one query over
many keys, fewer queries than keys, one head, head dims off a power of two, strided views, no mask).
Small block sizes (16, 32) make short sequences span several blocks, so every loop boundary is crossed.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton: kernels become interpreted

pytest.importorskip("triton")

from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

fa = importlib.import_module("gpt_core.kernels.triton.attention")  # the package re-exports `attention`, a function

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
RUNNABLE = torch.cuda.is_available() or isinstance(fa._attn_fwd, InterpretedFunction)
needs_kernels = pytest.mark.skipif(not RUNNABLE, reason="no GPU, and Triton was imported before TRITON_INTERPRET=1")

BLOCKS = [(16, 16), (16, 32), (32, 16), None]  # None: the block sizes the module picks
BLOCK_IDS = ["blocks16x16", "blocks16x32", "blocks32x16", "default_blocks"]


def reference(q, k, v, causal, keep=None, p=0.0):
    """softmax(q k^T / sqrt(d) + mask) (* keep / (1 - p)) v by plain PyTorch, queries aligned to the end of
    the keys (query i at position Tk - Tq + i): sdpa's is_causal aligns them to the start instead."""
    tq, tk = q.shape[-2], k.shape[-2]
    if keep is None:
        mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril_(tk - tq) if causal else None
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril_(tk - tq)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = weights * keep / (1.0 - p) if p < 1.0 else weights * 0.0
    return weights @ v


def make(*shape, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE, dtype).requires_grad_()


def qkv(B, H, Tq, Tk, d, dtype=torch.float64):
    return tuple(make(B, H, t, d, dtype=dtype, seed=i) for i, t in enumerate((Tq, Tk, Tk), start=1))


def check_forward_and_grads(close, label, ours, theirs, leaves, tol):
    close(label, ours, theirs, tol)
    cotangent = make(*ours.shape, dtype=ours.dtype, seed=9).detach()
    got = torch.autograd.grad(ours, leaves, cotangent)
    want = torch.autograd.grad(theirs, leaves, cotangent.to(theirs.dtype))
    for name, a, b in zip("qkv" if len(leaves) == 3 else ["qkv"], got, want, strict=True):
        assert a.dtype == leaves[0].dtype
        close(f"{label} d{name}", a, b.to(a.dtype), tol)


def test_kernels_run_in_the_interpreter_without_a_gpu():
    """Without CUDA the kernels must be interpreted (else every test below would be skipped)."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the kernels are compiled")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    assert isinstance(fa._attn_fwd, InterpretedFunction), "Triton was imported before TRITON_INTERPRET=1 was set"


SHAPES = {  # B, H, Tq, Tk, d, causal
    "odd_T7_causal": (2, 3, 7, 7, 16, True),
    "T33_off_the_block_grid_d24": (1, 2, 33, 33, 24, True),
    "decode_one_query_over_9_keys": (2, 1, 1, 9, 16, True),
    "kv_cache_5_queries_over_12_keys": (1, 2, 5, 12, 16, True),
    "kv_cache_20_queries_over_45_keys_d24": (1, 1, 20, 45, 24, True),
    "kv_cache_20_queries_over_21_keys": (1, 1, 20, 21, 16, True),  # a block's last row reaches a new key block
    "T32_on_the_block_grid": (1, 1, 32, 32, 16, True),
    "one_head_d48": (1, 1, 17, 17, 48, True),
    "not_causal_T32_on_the_block_grid": (1, 2, 32, 32, 16, False),
    "not_causal_T33": (1, 2, 33, 33, 16, False),
    "not_causal_more_queries_than_keys": (1, 1, 12, 5, 16, False),
}


@needs_kernels
@pytest.mark.parametrize("blocks", BLOCKS, ids=BLOCK_IDS)
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_float64_forward_and_gradients_match_pytorch_to_1e12(close, shape, blocks):
    B, H, Tq, Tk, d, causal = shape
    q, k, v = qkv(B, H, Tq, Tk, d)
    ours = fa.flash_attention(q, k, v, causal, blocks=blocks)
    assert ours.shape == (B, H, Tq, d) and ours.dtype == torch.float64
    check_forward_and_grads(close, "triton attention fp64", ours, reference(q, k, v, causal), (q, k, v), 1e-12)


@needs_kernels
@pytest.mark.parametrize("blocks", [(16, 16), None], ids=["blocks16x16", "default_blocks"])
def test_strided_views_of_a_fused_qkv_projection_match_pytorch(close, blocks):
    """q, k, v as the model makes them: transposed views into one (B, T, 3 H d) projection, never contiguous."""
    B, T, H, d = 2, 19, 3, 24
    fused = make(B, T, 3 * H * d)
    q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in fused.split(H * d, 2))  # each (B, H, T, d)
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    ours = fa.flash_attention(q, k, v, True, blocks=blocks)
    check_forward_and_grads(close, "triton attention fp64 strided", ours, reference(q, k, v, True), (fused,), 1e-12)


@needs_kernels
def test_the_output_and_gradients_are_laid_out_as_the_models_activations_so_nothing_copies_them(close):
    """O, dQ, dK and dV are (B, H, T, d) laid out (B, T, H, d): the model's merge of the heads into (B, T, C) is a
    view of O, the gradient of that merge reaches the backward in O's layout (no copy), and dQ, dK, dV reach the
    qkv projection's (B, T, 3C) through views, to its split's one concatenation."""
    B, T, H, d = 2, 19, 3, 16
    C = H * d
    fused = make(B, T, 3 * C)
    q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in fused.split(C, 2))
    out = fa.attention(q, k, v, True)
    merged = out.transpose(1, 2).reshape(B, T, C)
    assert merged.data_ptr() == out.data_ptr() and merged._base is not None  # a view
    grads = {}
    for name, tensor in (("out", out), ("q", q), ("k", k), ("v", v)):
        tensor.register_hook(lambda grad, name=name: grads.setdefault(name, grad))
    (merged * make(B, T, C).detach()).sum().backward()
    assert grads["out"].stride() == out.stride()
    assert all(grads[name].transpose(1, 2).is_contiguous() for name in "qkv")
    upstream = grads["out"].transpose(1, 2).reshape(B, T, C)
    wanted = torch.autograd.grad(reference(q, k, v, True).transpose(1, 2).reshape(B, T, C), fused, upstream)[0]
    close("triton attention fp64 d(qkv) through views", fused.grad, wanted, 1e-12)


DROPOUT_SHAPES = {
    "T33_d24_p0.3": (2, 2, 33, 33, 24, True, 0.3),
    "kv_cache_5_over_12_p0.5": (1, 2, 5, 12, 16, True, 0.5),
    "not_causal_T20_p0.1": (1, 1, 20, 20, 16, False, 0.1),
}


@needs_kernels
@pytest.mark.parametrize("blocks", [(16, 16), (32, 16), None], ids=["blocks16x16", "blocks32x16", "default_blocks"])
@pytest.mark.parametrize("shape", DROPOUT_SHAPES.values(), ids=DROPOUT_SHAPES.keys())
def test_dropout_equals_reference_attention_with_the_materialised_keep_mask(close, shape, blocks):
    """Forward and backward regenerate one mask: the fused kernels equal plain attention under it."""
    B, H, Tq, Tk, d, causal, p = shape
    q, k, v = qkv(B, H, Tq, Tk, d)
    seed = 1234
    keep = fa.dropout_keep(seed, B, H, Tq, Tk, p, DEVICE)
    assert keep.shape == (B, H, Tq, Tk) and keep.dtype == torch.bool
    ours = fa.flash_attention(q, k, v, causal, p, seed=seed, blocks=blocks)
    theirs = reference(q, k, v, causal, keep, p)
    check_forward_and_grads(close, "triton attention fp64 dropout", ours, theirs, (q, k, v), 1e-12)


@needs_kernels
def test_dropout_keeps_a_fraction_near_one_minus_p_with_a_mask_distinct_per_head_and_row():
    p = 0.3
    keep = fa.dropout_keep(7, 2, 4, 64, 64, p, DEVICE)  # 32768 draws: the fraction's std is 0.0025
    assert abs(keep.double().mean().item() - (1 - p)) < 0.015
    assert not torch.equal(keep[0, 0], keep[0, 1]) and not torch.equal(keep[0], keep[1])
    assert not torch.equal(keep[0, 0, 0], keep[0, 0, 1])
    assert torch.equal(keep, fa.dropout_keep(7, 2, 4, 64, 64, p, DEVICE))
    assert not torch.equal(keep, fa.dropout_keep(8, 2, 4, 64, 64, p, DEVICE))


@needs_kernels
def test_the_same_torch_seed_gives_the_same_dropout_and_another_seed_a_different_one():
    q, k, v = qkv(1, 2, 9, 9, 16)

    def run(torch_seed):
        torch.manual_seed(torch_seed)
        out = fa.attention(q, k, v, True, 0.4)
        return (out, *torch.autograd.grad(out.sum(), (q, k, v)))

    first, again, other = run(3), run(3), run(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


@needs_kernels
def test_dropout_p_one_gives_zeros_and_zero_gradients_without_nan():
    q, k, v = qkv(1, 2, 7, 7, 16)
    out = fa.attention(q, k, v, True, 1.0)
    assert torch.equal(out, torch.zeros_like(out))
    for grad in torch.autograd.grad(out.sum(), (q, k, v)):
        assert torch.equal(grad, torch.zeros_like(grad))
    assert not fa.dropout_keep(0, 1, 2, 7, 7, 1.0, DEVICE).any()


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_half_precision_stays_within_2e2_of_float32_on_the_same_inputs(close, dtype):
    """16-bit inputs, fp32 accumulation: the outputs and gradients keep the input dtype and stay near a
    float32 reference computed on the very same (rounded) inputs, relative to their size. (The interpreter
    rounds fp32 to bf16 toward zero where a GPU rounds to nearest: in bf16 it errs up to twice as much.)"""
    B, H, Tq, Tk, d = 1, 2, 40, 40, 48
    label = f"triton attention {str(dtype).removeprefix('torch.')}"
    q, k, v = qkv(B, H, Tq, Tk, d, dtype=dtype)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    ours = fa.flash_attention(q, k, v, True, blocks=(16, 16))
    assert ours.dtype == dtype
    theirs = reference(q32, k32, v32, True)
    close(label, ours.float(), theirs, 2e-2 * max(1.0, theirs.abs().max().item()))
    cotangent = make(B, H, Tq, d, dtype=dtype, seed=9).detach()
    got = torch.autograd.grad(ours, (q, k, v), cotangent)
    want = torch.autograd.grad(reference(q32, k32, v32, True), (q32, k32, v32), cotangent.float())
    for name, a, b in zip("qkv", got, want, strict=True):
        assert a.dtype == dtype
        close(f"{label} d{name}", a.float(), b, 2e-2 * max(1.0, b.abs().max().item()))


@needs_kernels
def test_float32_with_the_default_blocks_over_several_blocks_matches_float64(close):
    q, k, v = qkv(1, 1, 70, 70, 64, dtype=torch.float32)
    ours = fa.attention(q, k, v)
    theirs = reference(*(x.double() for x in (q, k, v)), True).float()
    check_forward_and_grads(close, "triton attention fp32", ours, theirs, (q, k, v), 1e-5)


@needs_kernels
def test_without_a_gradient_to_record_only_the_forward_runs(monkeypatch):
    q, k, v = qkv(1, 1, 7, 7, 16)
    with_graph = fa.attention(q, k, v)
    assert with_graph.grad_fn is not None
    monkeypatch.setattr(fa._FlashAttention, "apply", lambda *a: pytest.fail("the autograd Function ran"))
    with torch.no_grad():
        bare = fa.attention(q, k, v)
    assert bare.grad_fn is None and torch.equal(bare, with_graph.detach())
    assert torch.equal(fa.attention(q.detach(), k.detach(), v.detach()), bare)


def test_rejects_causal_with_more_queries_than_keys_dropout_outside_0_1_and_heads_of_0_or_over_128():
    q, k, v = qkv(1, 1, 5, 4, 16)
    with pytest.raises(ValueError, match="no more queries than keys"):
        fa.attention(q, k, v)
    with pytest.raises(ValueError, match="dropout_p"):
        fa.attention(q, q, q, dropout_p=1.5)
    for d in (136, 0):  # 0 divided by zero in the scale 1 / sqrt(d)
        head = make(1, 1, 4, d)
        with pytest.raises(ValueError, match="head dim from 1 to 128"):
            fa.attention(head, head, head)


def test_the_signature_is_the_attention_slots():
    from gpt_core.kernels.attention import attention as fast_attention

    assert list(inspect.signature(fa.attention).parameters) == list(inspect.signature(fast_attention).parameters)


def test_float32_matmuls_are_exact_unless_pytorch_allows_tf32():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert fa._precision(torch.float32) == "ieee" and fa._precision(torch.float64) == "ieee"
        torch.backends.cuda.matmul.allow_tf32 = True
        assert fa._precision(torch.float32) == "tf32" and fa._precision(torch.bfloat16) == "ieee"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("switch", ["torch.backends", "torch.backends.cuda.matmul"])
def test_tf32_set_by_backend_is_read_as_tf32_where_allow_tf32_raised(switch):
    backend = torch.backends if switch == "torch.backends" else torch.backends.cuda.matmul
    try:
        torch.backends.cuda.matmul.fp32_precision = "none"  # follows torch.backends' own (an earlier test set it)
        backend.fp32_precision = "tf32"
        assert fa._precision(torch.float32) == "tf32" and fa._precision(torch.bfloat16) == "ieee"
    finally:
        backend.fp32_precision = torch.backends.cuda.matmul.fp32_precision = "none"
    assert fa._precision(torch.float32) == "ieee"


def test_aot_specs_cover_every_kernel_at_every_dot_precision_and_head_dim_with_the_tiles_it_launches_with():
    kernels = {fa._attn_fwd, fa._bwd_dkdv, fa._bwd_dq}
    dtypes = {"*fp32": torch.float32, "*bf16": torch.bfloat16, "*fp16": torch.float16}
    covered = set()
    for fn, sig, const, options in fa.AOT_SPECS:
        assert list(sig) == fn.arg_names
        assert {name for name, ty in sig.items() if ty == "constexpr"} == set(const)
        if fn in kernels:
            dtype, d = dtypes[sig["Q"]], const["HEAD_DIM"]
            block_m, block_n, num_warps = fa._tiles(dtype, d, const["PRECISION"])
            assert (const["BLOCK_M"], const["BLOCK_N"]) == (block_m, block_n)
            assert options == {"num_warps": num_warps, "num_stages": fa._NUM_STAGES}
            covered.add((fn, sig["Q"], const["PRECISION"], d))
    inputs = [("*fp32", "ieee"), ("*fp32", "tf32"), ("*bf16", "ieee"), ("*fp16", "ieee")]
    assert covered == {(fn, ty, p, d) for fn in kernels for ty, p in inputs for d in (16, 32, 64, 128)}
    preprocessed = {
        (sig["Out"], const["HEAD_DIM"], const["BLOCK_M"])
        for fn, sig, const, _ in fa.AOT_SPECS
        if fn is fa._bwd_preprocess
    }
    launched = {(ty, d, fa._tiles(dtypes[ty], d, p)[0]) for ty, p in inputs for d in (16, 32, 64, 128)}
    assert preprocessed == launched
    assert fa._dropout_keep_kernel in {fn for fn, *_ in fa.AOT_SPECS}


@pytest.mark.parametrize("queries", [1, 15, 1024])
def test_any_number_of_queries_launches_the_tables_tiles_the_ones_compiled_ahead_of_time(queries):
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for d in (16, 64, 128):
            q = torch.zeros(1, 1, queries, d, dtype=dtype)
            meta = fa._launch_meta(q, True, 0.0, None)
            tiles = fa._tiles(dtype, d, fa._precision(dtype))
            assert (meta["BLOCK_M"], meta["BLOCK_N"], meta["num_warps"]) == tiles


def test_block_sizes_are_powers_of_two_of_at_least_16_and_shrink_with_the_row_size():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for d in (16, 24, 48, 64, 80, 128):
            for precision in ("ieee", "tf32"):
                m, n, warps = fa._tiles(dtype, d, precision)
                assert m >= 16 and n >= 16 and m & (m - 1) == 0 and n & (n - 1) == 0 and warps in (4, 8)
    for d in (16, 32, 64, 128):  # fp32's rows hold twice the bytes: its tiles are never the larger
        half = math.prod(fa._tiles(torch.float16, d, "ieee")[:2])
        assert math.prod(fa._tiles(torch.float32, d, "ieee")[:2]) <= half
        assert math.prod(fa._tiles(torch.float32, d, "tf32")[:2]) <= half
    assert fa._block_d(24) == 32 and fa._block_d(48) == 64 and fa._block_d(8) == 16


def test_no_launch_puts_batch_times_heads_on_an_axis_cuda_caps_at_65535(monkeypatch):
    """CUDA caps a grid's second and third axes at 65,535: full-batch modadd (20,100 sequences x 4 heads) would
    not launch. Each launch is recorded here, not run, at B * H = 80,400."""
    grids = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            grids.append((self.name, grid))
            return lambda *args, **kwargs: None

    for name in ("_attn_fwd", "_bwd_preprocess", "_bwd_dkdv", "_bwd_dq", "_dropout_keep_kernel"):
        monkeypatch.setattr(fa, name, Recorder(name))
    q, k, v = (torch.zeros(20_100, 4, 3, 16) for _ in range(3))
    out, lse = fa._forward(q, k, v, True, 0.1, 7, None)
    fa._backward(out, q, k, v, out, lse, True, 0.1, 7, None)
    fa.dropout_keep(7, 20_100, 4, 3, 3, 0.1, "cpu")
    assert {name for name, _ in grids} == {"_attn_fwd", "_bwd_preprocess", "_bwd_dkdv", "_bwd_dq",
                                           "_dropout_keep_kernel"}  # fmt: skip
    for name, grid in grids:
        assert all(size <= 65_535 for size in grid[1:]), (name, grid)
        assert math.prod(grid) >= 20_100 * 4, (name, grid)  # every (batch, head) has its programs
