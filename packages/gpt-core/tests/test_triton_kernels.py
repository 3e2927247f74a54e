"""The Triton LayerNorm, cross-entropy, GELU, softmax and dropout kernels, each against PyTorch's own built-in (dropout,
which draws at random, against the mask its output shows).

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set before Triton is imported), which
executes the same kernel code on CPU tensors, float64 included: in float64 every forward and every gradient must
match torch.nn.functional to 1e-12, at the shapes that catch masking and indexing mistakes (one row, odd row
counts, widths that are not powers of two, rows wider than one block). bf16 and fp16 are held to 2e-2 of the
float32 reference, their gradients handed back in the inputs' dtypes.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels then run on the CPU
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402  (the reference, in tests only)

from gpt_core.kernels.triton.attention import attention  # noqa: E402
from gpt_core.kernels.triton.cross_entropy import cross_entropy  # noqa: E402
from gpt_core.kernels.triton.dropout import dropout  # noqa: E402
from gpt_core.kernels.triton.gelu import gelu  # noqa: E402
from gpt_core.kernels.triton.layer_norm import layer_norm  # noqa: E402
from gpt_core.kernels.triton.softmax import softmax  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64 = 1e-12
HALF = 2e-2  # bf16 and fp16, relative to the largest entry of the float32 reference
MODULES = ("layer_norm", "cross_entropy", "gelu", "softmax", "dropout")


def randn(*shape: int, seed: int = 0, scale: float = 1.0, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(DEVICE, dtype)


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def forward_backward(fn, inputs, cotangent=None):
    """fn's output on fresh leaf copies of `inputs`, the gradient of each input under a seeded cotangent, and
    the cotangent (pass it back in to give another function the same one)."""
    leaves = [leaf(t) for t in inputs]
    out = fn(*leaves)
    if cotangent is None:
        cotangent = randn(*out.shape, seed=7, dtype=out.dtype) if out.dim() else torch.ones_like(out)
    return out, torch.autograd.grad(out, leaves, cotangent.to(out.dtype)), cotangent


def check(close, label, ours, theirs, inputs, tol=F64):
    """ours and theirs agree on the output and on every input's gradient, to tol (float64)."""
    out, grads, cotangent = forward_backward(ours, inputs)
    ref, ref_grads, _ = forward_backward(theirs, inputs, cotangent)
    close(f"triton {label}", out, ref, tol)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        close(f"triton {label} grad {i}", g, r, tol)


def near_in_half(ours: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype):
    """16-bit result: in `dtype`, within HALF of the float32 reference's scale."""
    assert ours.dtype == dtype
    error = (ours.float() - reference).abs().max().item()
    assert error <= HALF * reference.abs().max().item(), f"{error:.3e}"


def check_half(ours, theirs, inputs, dtype):
    """ours on 16-bit inputs against theirs on the same values in float32: every gradient in `dtype` and within
    HALF; returns both outputs."""
    out, grads, cotangent = forward_backward(ours, inputs)
    ref, ref_grads, _ = forward_backward(theirs, [t.float() for t in inputs], cotangent.float())
    for g, r in zip(grads, ref_grads, strict=True):
        near_in_half(g, r, dtype)
    return out, ref


# LayerNorm ---------------------------------------------------------------------------------------------------

LN_SHAPES = [(1, 48), (7, 65), (3, 5, 97), (37, 64)]  # one row, odd counts, widths not powers of two


@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", LN_SHAPES, ids=str)
def test_layer_norm_matches_pytorch_in_float64_forward_and_x_weight_bias_gradients(close, shape, has_bias):
    width = shape[-1]
    x, weight, bias = randn(*shape, scale=3.0), randn(width, seed=1), randn(width, seed=2)
    if has_bias:
        check(close, "layer_norm", layer_norm, lambda x, w, b: F.layer_norm(x, (width,), w, b), [x + 1.5, weight, bias])
    else:
        check(close, "layer_norm", layer_norm, lambda x, w: F.layer_norm(x, (width,), w), [x + 1.5, weight])


def test_layer_norm_takes_non_contiguous_inputs(close):
    base = randn(97, 6)
    weight, bias = randn(97, seed=1), randn(97, seed=2)
    for x in (base.t(), randn(6, 128)[:, 10:107]):  # columns strided; rows strided within a wider tensor
        check(close, "layer_norm", layer_norm, lambda x, w, b: F.layer_norm(x, (97,), w, b), [x, weight, bias])


def test_layer_norm_weight_and_bias_gradients_are_the_same_bits_on_every_run():
    x, weight, bias = leaf(randn(37, 65)), leaf(randn(65, seed=1)), leaf(randn(65, seed=2))
    dy = randn(37, 65, seed=3)
    runs = [torch.autograd.grad(layer_norm(x, weight, bias), (weight, bias), dy) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


@pytest.mark.parametrize("has_bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)], ids=str)
def test_layer_norm_of_no_rows_has_zero_weight_and_bias_gradients(shape, has_bias):
    """The backward divided by the number of rows."""
    x, weight, bias = leaf(randn(*shape)), leaf(randn(8, seed=1)), leaf(randn(8, seed=2)) if has_bias else None
    layer_norm(x, weight, bias).sum().backward()
    assert x.grad.shape == shape and torch.equal(weight.grad, torch.zeros(8, dtype=weight.dtype))
    assert bias is None or torch.equal(bias.grad, torch.zeros(8, dtype=bias.dtype))


def test_layer_norm_without_a_gradient_runs_the_forward_alone(close):
    x, weight, bias = randn(5, 48), randn(48, seed=1), randn(48, seed=2)
    with torch.no_grad():
        y = layer_norm(leaf(x), weight, bias)
    assert y.grad_fn is None
    close("triton layer_norm", y, F.layer_norm(x, (48,), weight, bias), F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_layer_norm_in_16_bits_is_near_the_float32_reference_with_gradients_in_the_input_dtypes(dtype):
    inputs = [
        randn(9, 96, scale=2.0, dtype=dtype) + 1.0,
        randn(96, seed=1, dtype=dtype),
        randn(96, seed=2, dtype=dtype),
    ]
    out, ref = check_half(layer_norm, lambda x, w, b: F.layer_norm(x, (96,), w, b), inputs, dtype)
    near_in_half(out, ref, dtype)


# Cross-entropy -----------------------------------------------------------------------------------------------


def targets_for(n: int, vocab: int, ignored: tuple[int, ...] = (), seed: int = 5) -> torch.Tensor:
    targets = torch.randint(vocab, (n,), generator=torch.Generator().manual_seed(seed))
    targets[list(ignored)] = -100
    return targets.to(DEVICE)


def check_cross_entropy(close, logits, targets, tol=F64):
    check(
        close,
        "cross_entropy",
        lambda x: cross_entropy(x, targets),
        lambda x: F.cross_entropy(x, targets),
        [logits],
        tol,
    )


@pytest.mark.parametrize(
    ("n", "vocab", "ignored"),
    [(1, 65, ()), (7, 97, ()), (7, 97, (0, 3, 6)), (5, 48, (1,))],
    ids=["one-row", "odd-rows", "some-ignored", "width-48"],
)
def test_cross_entropy_matches_pytorch_in_float64_loss_and_logits_gradient(close, n, vocab, ignored):
    check_cross_entropy(close, randn(n, vocab, scale=2.0), targets_for(n, vocab, ignored))


def test_cross_entropy_of_logits_times_1000_is_finite_and_exact(close):
    check_cross_entropy(close, randn(6, 97, scale=1000.0), targets_for(6, 97, (2,)))


def test_cross_entropy_over_a_vocabulary_wider_than_one_block_gpt2s_50304(close):
    check_cross_entropy(close, randn(2, 50304), targets_for(2, 50304))


def test_cross_entropy_with_a_whole_block_of_minus_inf_logits_before_the_first_finite_one(close):
    logits = randn(3, 5000)
    logits[:, :4500] = float("-inf")
    targets = torch.tensor([4600, 4999, -100], device=DEVICE)
    out, (grad,), cotangent = forward_backward(lambda x: cross_entropy(x, targets), [logits])
    ref, (ref_grad,), _ = forward_backward(lambda x: F.cross_entropy(x, targets), [logits], cotangent)
    close("triton cross_entropy", out, ref, F64)
    assert torch.equal(grad[:, :4500], ref_grad[:, :4500])  # zero where the logit is -inf
    close("triton cross_entropy grad 0", grad[:, 4500:], ref_grad[:, 4500:], F64)


def test_cross_entropy_with_every_target_ignored_is_nan_with_zero_gradient_like_pytorch():
    logits, targets = leaf(randn(4, 65)), torch.full((4,), -100, device=DEVICE)
    loss, reference = cross_entropy(logits, targets), F.cross_entropy(logits, targets)
    assert loss.isnan() and reference.isnan()
    (grad,) = torch.autograd.grad(loss, logits)
    assert torch.equal(grad, torch.zeros_like(grad))


def test_cross_entropy_ignores_a_row_of_minus_inf_logits_whose_target_is_ignored(close):
    """exp(-inf - lse) with lse = -inf is nan: times a zero scale it stayed nan, in the ignored row's gradient."""
    logits, targets = randn(3, 65), torch.tensor([2, -100, 4], device=DEVICE)
    logits[1] = float("-inf")
    loss = cross_entropy(leaf(logits), targets)
    scored = torch.tensor([True, False, True], device=DEVICE)
    close("cross_entropy", loss, F.cross_entropy(logits[scored], targets[scored]), F64)
    (grad,) = torch.autograd.grad(cross_entropy(logits := leaf(logits), targets), logits)
    assert torch.isfinite(grad).all() and torch.equal(grad[1], torch.zeros_like(grad[1]))


@pytest.mark.parametrize("target", [65, 1000, -1], ids=["V", "far past V", "-1"])
def test_cross_entropy_of_a_target_outside_the_vocabulary_is_nan_not_a_read_of_other_memory(target):
    """PyTorch raises; the kernel read row 1's logits for target V in row 0, a plausible loss, in silence."""
    logits, targets = leaf(randn(2, 65)), torch.tensor([target, 3], device=DEVICE)
    loss = cross_entropy(logits, targets)
    assert loss.isnan()
    (grad,) = torch.autograd.grad(loss, logits)
    assert grad[0].isnan().all() and torch.isfinite(grad[1]).all()


def test_cross_entropy_takes_leading_dimensions_and_strided_logits(close):
    logits = randn(2, 3, 130)[..., :97]  # (B, T, V) rows strided within a wider tensor
    targets = targets_for(6, 97, (4,)).view(2, 3)
    check(
        close,
        "cross_entropy",
        lambda x: cross_entropy(x, targets),
        lambda x: F.cross_entropy(x.reshape(6, 97), targets.view(6)),
        [logits],
    )


def test_cross_entropy_without_a_gradient_runs_the_forward_alone(close):
    logits, targets = randn(5, 65), targets_for(5, 65, (1,))
    with torch.no_grad():
        loss = cross_entropy(leaf(logits), targets)
    assert loss.grad_fn is None
    close("triton cross_entropy", loss, F.cross_entropy(logits, targets), F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cross_entropy_of_16_bit_logits_is_a_float32_loss_with_a_gradient_in_their_dtype(dtype):
    logits, targets = randn(9, 97, scale=3.0, dtype=dtype), targets_for(9, 97, (2,))
    loss, ref = check_half(lambda x: cross_entropy(x, targets), lambda x: F.cross_entropy(x, targets), [logits], dtype)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - ref.item()) <= HALF * abs(ref.item())


# GELU --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1,), (7, 65), (3, 5, 97), (2049,)], ids=str)  # (2049,): three programs, one short
def test_gelu_matches_pytorchs_tanh_gelu_in_float64_forward_and_gradient(close, shape):
    check(close, "gelu", gelu, lambda x: F.gelu(x, approximate="tanh"), [randn(*shape, scale=4.0)])


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's numpy: exp(-2u) = inf, meant
def test_gelu_far_out_in_both_tails_stays_finite_and_exact(close):
    x = torch.tensor([-1e4, -300.0, -40.0, -10.0, 0.0, 10.0, 40.0, 300.0, 1e4], dtype=torch.float64, device=DEVICE)
    check(close, "gelu", gelu, lambda x: F.gelu(x, approximate="tanh"), [x])


def test_gelu_takes_non_contiguous_input(close):
    check(close, "gelu", gelu, lambda x: F.gelu(x, approximate="tanh"), [randn(65, 7, scale=3.0).t()])


def test_gelu_without_a_gradient_runs_the_forward_alone(close):
    x = randn(5, 48, scale=3.0)
    with torch.no_grad():
        y = gelu(leaf(x))
    assert y.grad_fn is None
    close("triton gelu", y, F.gelu(x, approximate="tanh"), F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gelu_in_16_bits_is_near_the_float32_reference_with_a_gradient_in_the_input_dtype(dtype):
    out, ref = check_half(gelu, lambda x: F.gelu(x, approximate="tanh"), [randn(9, 96, scale=3.0, dtype=dtype)], dtype)
    near_in_half(out, ref, dtype)


# Softmax -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 48), (7, 65), (3, 5, 97), (2, 9000)], ids=str)  # (2, 9000): three blocks a row
def test_softmax_matches_pytorch_in_float64_forward_and_gradient(close, shape):
    check(close, "softmax", softmax, lambda x: torch.softmax(x, -1), [randn(*shape, scale=2.0)])


def test_softmax_of_logits_times_1000_is_finite_and_exact(close):
    check(close, "softmax", softmax, lambda x: torch.softmax(x, -1), [randn(5, 97, scale=1000.0)])


@pytest.mark.parametrize("width", [9, 97, 9000], ids=lambda w: f"width{w}")
def test_softmax_of_causally_masked_attention_scores_gives_minus_inf_entries_weight_zero(close, width):
    queries = min(width, 12)  # the last `queries` of `width` positions, as under a KV cache
    scores = randn(2, queries, width, scale=2.0)
    allowed = torch.ones(queries, width, dtype=torch.bool, device=DEVICE).tril(width - queries)
    check(close, "softmax", softmax, lambda x: torch.softmax(x, -1), [scores.masked_fill(~allowed, float("-inf"))])


def test_softmax_with_whole_blocks_of_minus_inf_before_the_first_finite_entry(close):
    x = randn(2, 9000)
    x[:, :8500] = float("-inf")  # the first two blocks of 4096 are all -inf
    check(close, "softmax", softmax, lambda x: torch.softmax(x, -1), [x])


def test_softmax_takes_non_contiguous_input(close):
    check(close, "softmax", softmax, lambda x: torch.softmax(x, -1), [randn(97, 6).t()])


def test_softmax_without_a_gradient_runs_the_forward_alone(close):
    x = randn(5, 65)
    with torch.no_grad():
        y = softmax(leaf(x))
    assert y.grad_fn is None
    close("triton softmax", y, torch.softmax(x, -1), F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_softmax_in_16_bits_is_near_the_float32_reference_with_a_gradient_in_the_input_dtype(dtype):
    out, ref = check_half(softmax, lambda x: torch.softmax(x, -1), [randn(9, 97, scale=3.0, dtype=dtype)], dtype)
    near_in_half(out, ref, dtype)


# Every kernel ------------------------------------------------------------------------------------------------


def weighted_softmax(fn):
    """fn(x) times fixed weights: the gradient of its sum is not the zero that softmax's own sum has."""
    return lambda x: fn(x) * torch.arange(float(x.shape[-1]), dtype=x.dtype, device=x.device)


SUMMED = {
    "layer_norm": (lambda x: layer_norm(x, torch.ones_like(x[0, 0])), lambda x: F.layer_norm(x, x.shape[-1:])),
    "gelu": (gelu, lambda x: F.gelu(x, approximate="tanh")),
    "softmax": (weighted_softmax(softmax), weighted_softmax(lambda x: torch.softmax(x, -1))),
}


@pytest.mark.parametrize("label", SUMMED)
def test_the_gradient_of_a_sum_an_expanded_stride_0_cotangent_is_exact(close, label):
    x = randn(3, 4, 65, scale=2.0)
    grads = [torch.autograd.grad(fn(leaf_x := leaf(x)).sum(), leaf_x)[0] for fn in SUMMED[label]]
    close(f"triton {label} grad 0", grads[0], grads[1], F64)


def test_layer_norm_of_bf16_activations_with_float32_weight_and_bias_keeps_each_ones_dtype():
    x, weight, bias = randn(9, 96, dtype=torch.bfloat16), randn(96, seed=1).float(), randn(96, seed=2).float()
    out, (dx, dweight, dbias), _ = forward_backward(layer_norm, [x, weight, bias])
    assert [t.dtype for t in (out, dx, dweight, dbias)] == [torch.bfloat16] * 2 + [torch.float32] * 2
    reference = lambda x, w, b: F.layer_norm(x, (96,), w, b)
    ref, (_, ref_dweight, ref_dbias), _ = forward_backward(reference, [x.float(), weight, bias])
    near_in_half(out, ref, torch.bfloat16)
    for ours, theirs in ((dweight, ref_dweight), (dbias, ref_dbias)):
        assert (ours - theirs).abs().max() <= HALF * theirs.abs().max()


# Dropout -----------------------------------------------------------------------------------------------------


def kept(y: torch.Tensor) -> torch.Tensor:
    """The mask an output of nonzero inputs shows: 1 where the element was kept."""
    return (y != 0).to(y.dtype)


@pytest.mark.parametrize("shape", [(1,), (7, 65), (3, 5, 97), (2049,)], ids=str)  # (2049,): three programs, one short
def test_dropout_keeps_x_over_1_minus_p_and_its_backward_regenerates_the_same_mask(close, shape):
    """Float64: the kept elements are exactly x / (1 - p), and the gradient is the cotangent through the very mask
    the forward drew (a backward drawing a fresh mask, or none, fails)."""
    x = leaf(randn(*shape) + 10.0)  # nonzero: a zero in the output is a dropped element
    torch.manual_seed(0)
    y = dropout(x, 0.3, True)
    cotangent = randn(*shape, seed=7)
    (grad,) = torch.autograd.grad(y, x, cotangent)
    keep = kept(y)
    assert 0 < keep.sum() < keep.numel() or keep.numel() < 8
    close("triton dropout", y, x.detach() * keep / (1 - 0.3), F64)
    close("triton dropout grad", grad, cotangent * keep / (1 - 0.3), F64)


def test_dropout_draws_from_torchs_generator_a_new_mask_each_call():
    x = randn(4096) + 10.0
    torch.manual_seed(5)
    first, second = kept(dropout(x, 0.5, True)), kept(dropout(x, 0.5, True))
    torch.manual_seed(5)
    assert torch.equal(kept(dropout(x, 0.5, True)), first)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_drops_a_share_p_of_the_elements_and_independently_of_their_place(p):
    """2^16 elements: the share dropped within 6 standard deviations of p, overall and in each half, and pairs of
    elements 1, 1,024 (a program's block) and 2^15 apart dropped together p^2 of the time (a counter that restarted
    in each program would drop the same elements in every block)."""
    torch.manual_seed(1)
    dropped = 1 - kept(dropout(randn(2**16) + 10.0, p, True))
    for part, n in ((dropped, 2**16), (dropped[: 2**15], 2**15), (dropped[2**15 :], 2**15)):
        assert abs(part.mean().item() - p) < 6 * (p * (1 - p) / n) ** 0.5
    for apart in (1, 1024, 2**15):
        together = dropped[:-apart] * dropped[apart:]  # (2^16 - apart,)
        assert abs(together.mean().item() - p * p) < 6 * (p * p * (1 - p * p) / together.numel()) ** 0.5


def test_dropout_takes_non_contiguous_input_and_leaves_evaluation_and_p_0_alone(close):
    x = randn(65, 7).t() + 10.0
    torch.manual_seed(2)
    y = dropout(x, 0.25, True)
    close("triton dropout", y, x * kept(y) / 0.75, F64)
    assert dropout(x, 0.25, False) is x and dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability must be in"):
        dropout(x, 1.5, True)


def test_dropout_without_a_gradient_runs_the_kernel_alone():
    x = leaf(randn(5, 48) + 10.0)
    with torch.no_grad():
        y = dropout(x, 0.5, True)
    assert y.grad_fn is None and 0 < kept(y).sum() < y.numel()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dropout_in_16_bits_keeps_its_dtype_and_scales_the_kept_elements(dtype):
    """Within one unit in the last place of the float32 result: Triton's interpreter rounds bf16 toward zero where a
    GPU (and PyTorch) rounds to nearest."""
    x = leaf((randn(9, 96) + 10.0).to(dtype))
    torch.manual_seed(3)
    y = dropout(x, 0.2, True)
    (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert y.dtype == grad.dtype == dtype
    keep, ulp = kept(y).float(), torch.finfo(dtype).eps
    for ours, exact in ((y, x.detach().float() * keep / 0.8), (grad, keep / 0.8)):
        assert torch.equal(ours == 0, exact == 0)
        assert ((ours.float() - exact).abs() <= ulp * exact.abs()).all()


def test_dropout_reads_nothing_back_to_the_host():
    """Its seed is drawn on the device: a seed read as a Python int breaks torch.compile's graph at every call (and
    drawn on a GPU, waits for it). PyTorch's profiler counts the reads (`.item()`, `int(t)`, a kernel's own)."""
    x = leaf(randn(3000))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        dropout(x, 0.2, True).sum().backward()
    assert sum(event.name == "aten::_local_scalar_dense" for event in profile.events()) == 0


def test_dropout_refuses_more_elements_than_its_32_bit_counters_reach(monkeypatch):
    monkeypatch.setattr(importlib.import_module("gpt_core.kernels.triton.dropout"), "MAX_ELEMENTS", 100)
    with pytest.raises(ValueError, match="counts elements in 32 bits: 101 is too many"):
        dropout(randn(101), 0.5, True)


# Ahead-of-time specs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_each_module_lists_its_kernels_for_ahead_of_time_compilation_in_32_and_16_bits(name):
    module = importlib.import_module(f"gpt_core.kernels.triton.{name}")
    kernels = {kernel for kernel, *_ in module.AOT_SPECS}
    assert len(kernels) == (1 if name == "dropout" else 2)  # the forward and the backward (dropout: one kernel)
    input_dtypes = set()
    for kernel, signature, constexprs, _ in module.AOT_SPECS:
        assert set(signature) == set(kernel.arg_names), kernel.arg_names  # every argument typed, none extra
        assert {k for k, v in signature.items() if v == "constexpr"} == set(constexprs)
        input_dtypes.add(signature[kernel.arg_names[0]])  # the first argument: x, the logits, or y
    assert input_dtypes == {"*fp32", "*bf16", "*fp16"}


# Second derivatives ----------------------------------------------------------------------------------------------

ONCE = {
    "layer_norm": lambda x: layer_norm(x, torch.ones_like(x[0])),
    "cross_entropy": lambda x: cross_entropy(x, torch.tensor([1, 2, 3], device=DEVICE)),
    "gelu": gelu,
    "softmax": softmax,
    "dropout": lambda x: dropout(x, 0.3, True),
    "attention": lambda x: attention(*[x.view(1, 1, 3, 32)] * 3, True),  # q = k = v: 3 positions, d = 32
}


@pytest.mark.parametrize("module", ONCE)
def test_each_backward_refuses_to_be_differentiated_again_and_names_the_set_that_can(module):
    """Differentiated again, each would silently drop every term through what it saved (kernels/once.py)."""
    x = leaf(randn(3, 32) + 1.0)
    out = ONCE[module](x)
    with pytest.raises(RuntimeError, match=f"triton.{module}'s backward differentiates once.*REFERENCE_KERNELS"):
        torch.autograd.grad(out, x, torch.ones_like(out), create_graph=True)
    (grad,) = torch.autograd.grad(ONCE[module](x), x, torch.ones_like(out))  # once: as ever
    assert grad.shape == x.shape
