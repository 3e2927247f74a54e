"""verification_report: every comparison within 1e-12 in float64, a readable table, fresh inputs
per call unless seeded."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from wrong_kernels import online_softmax

import gpt_core.testing.verification as verification
from gpt_core import DEFAULT_KERNELS, FAST_KERNELS, KERNEL_SLOTS, REFERENCE_KERNELS
from gpt_core.kernels.layer_norm import _LayerNorm
from gpt_core.testing import (
    REFERENCE_SIGNATURES,
    Row,
    format_report,
    kernel_report,
    second_derivative_report,
    verification_report,
)
from gpt_core.testing.verification import dropout_report

_ORIGINAL_RANDN = verification._randn


EXPECTED_COMPONENTS = [
    "Linear",
    "Embedding",
    "LayerNorm",
    "LayerNorm without bias",
    "GELU (tanh)",
    "GELU (tanh), inputs x 30",
    "softmax",
    "softmax, logits x 1000",
    "log_softmax",
    "cross_entropy (ignore_index)",
    "dropout, evaluation",
    "dropout, training: y (1-p) + x [y = 0]",
    "dropout, training: share of zeros",
    "sdpa causal",
    "sdpa non-causal",
    "sdpa causal, queries offset by 4",
    "sdpa causal, single query",
    "sdpa causal, 133 positions, head size 5",
    "sdpa non-causal, 133 positions, head size 5",
    "sdpa causal, 70 queries offset by 63",
    "attention weights causal",
    "attention weights non-causal",
    "attention weights causal, queries offset by 4",
    "attention weights causal, single query",
    "sdpa causal, dropout: O (1-p) + P [O = 0]",
    "sdpa causal, dropout, v = [I V]: O[V] - O[I] V",
    "sdpa, dropout: share of weights dropped",
    "KV-cache decoding (learned positions)",
    "KV-cache decoding (rope positions)",
    "KV-cache decoding (none positions)",
    "KV-cache decoding (randomized learned positions)",
    "KV-cache decoding (randomized rope positions)",
]


def test_verification_report_rows_are_all_within_1e_12_in_float64(close, torch_references):
    rows = verification_report(torch_references, seed=0)
    assert [r.component for r in rows] == EXPECTED_COMPONENTS
    zero = torch.tensor(0.0, dtype=torch.float64)
    for row in rows:
        assert isinstance(row, Row)
        assert row.forward >= 0.0 and (row.grad is None or row.grad >= 0.0), row
        close(f"report: {row.component}", torch.tensor(row.forward, dtype=torch.float64), zero, 1e-12)
        if row.grad is not None:
            close(f"report: {row.component} grad", torch.tensor(row.grad, dtype=torch.float64), zero, 1e-12)
    # Every built-in comparison checks gradients; the KV-cache rows and dropout's shares dropped are forward-only.
    forward_only = ("KV-cache", "dropout, training: share", "sdpa, dropout: share")
    assert all(r.grad is not None for r in rows if not r.component.startswith(forward_only))
    assert all(r.grad is None for r in rows if r.component.startswith(forward_only))


def test_verification_report_detects_a_wrong_reference(torch_references):
    """The report is not vacuous: a reference whose gelu is the erf form shows a large diff."""

    erf_gelu = torch_references | {"gelu": lambda x: F.gelu(x)}  # the exact (erf) form, not the tanh one
    rows = {r.component: r for r in verification_report(erf_gelu, seed=0)}
    assert rows["GELU (tanh)"].forward > 1e-5
    assert rows["softmax"].forward <= 1e-12


def test_format_report_has_header_rule_and_one_line_per_row():
    rows = [Row("Linear", "linear", 1.5e-16, 2.0e-16), Row("KV-cache decoding", "full forward", 0.0, None)]
    text = format_report(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].split() == ["component", "reference", "max", "|diff|", "fwd", "max", "|diff|", "grad"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split() == ["Linear", "linear", "1.5e-16", "2.0e-16"]
    assert lines[3].split() == ["KV-cache", "decoding", "full", "forward", "0.0e+00", "-"]
    # Columns line up: the second column starts at the same offset on every line.
    starts = {line.index(word) for line, word in zip(lines[2:], ["linear", "full forward"], strict=True)}
    assert starts == {lines[0].index("reference")}


def test_format_report_of_a_real_report(torch_references):
    rows = verification_report(torch_references, seed=1)
    lines = format_report(rows).splitlines()
    assert len(lines) == len(rows) + 2
    for line, row in zip(lines[2:], rows, strict=True):
        assert line.startswith(row.component)


def _first_inputs(monkeypatch, torch_references, **kwargs) -> list[torch.Tensor]:
    """Run a report and return the random tensors its comparisons were fed."""
    seen: list[torch.Tensor] = []

    def spy(gen, dtype, *shape, **options):
        x = _ORIGINAL_RANDN(gen, dtype, *shape, **options)
        seen.append(x.detach().clone())
        return x

    monkeypatch.setattr(verification, "_randn", spy)
    verification_report(torch_references, **kwargs)
    return seen


def test_two_unseeded_reports_use_different_inputs(monkeypatch, torch_references):
    a = _first_inputs(monkeypatch, torch_references, seed=None)
    b = _first_inputs(monkeypatch, torch_references, seed=None)
    assert len(a) == len(b) > 0
    assert not any(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_seeded_reports_use_identical_inputs(monkeypatch, torch_references):
    a = _first_inputs(monkeypatch, torch_references, seed=3)
    b = _first_inputs(monkeypatch, torch_references, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = _first_inputs(monkeypatch, torch_references, seed=4)
    assert not torch.equal(a[0], c[0])


def test_seeded_report_is_reproducible_and_leaves_the_global_rng_alone(torch_references):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = verification_report(torch_references, seed=5)
    assert torch.equal(torch.get_rng_state(), before)
    assert verification_report(torch_references, seed=5) == first


def test_missing_references_are_named(torch_references):
    partial = {k: v for k, v in torch_references.items() if k != "sdpa"}
    try:
        verification_report(partial, seed=0)
    except ValueError as error:
        assert "sdpa" in str(error)
    else:
        raise AssertionError("a missing reference must be refused")
    assert set(torch_references) == set(REFERENCE_SIGNATURES)


# kernel_report: a replacement kernel pinned on its slot's cases ------------------------------------
def _own(slot: str, kernels=DEFAULT_KERNELS):
    """gpt-core's own kernel for `slot` (in `kernels`), as a new function object (so the model treats it as swapped)
    with its signature (so an attention kernel is seen to take dropout_p)."""
    kernel = getattr(kernels, slot)
    return functools.wraps(kernel)(lambda *args, **kwargs: kernel(*args, **kwargs))


STRIDED = {
    "attention": ["sdpa causal, q, k, v strided (heads of one qkv tensor)",
                  "sdpa non-causal, 133 positions, head size 5, q, k, v strided"],
    "attention_weights": ["attention weights causal, q, k strided (heads of one qkv tensor)"],
    "layer_norm": ["LayerNorm, x strided (a slice of a wider tensor)"],
    "gelu": ["GELU (tanh), x strided (a slice of a wider tensor)"],
}  # fmt: skip
"""The cases kernel_report runs, beyond verify's table, on inputs strided as a model hands them over."""
MASKED = ["softmax, -inf below each row's 5th best (top-k)", "softmax, the first 4100 of 4160 -inf",
          "softmax, one finite entry per row"]  # fmt: skip
"""The cases kernel_report runs, beyond verify's table, on logits holding -inf, as sampling gives them."""
MODELS = [f"GPT forward and backward ({pos} positions)" for pos in ("learned", "rope", "none")]


@pytest.mark.parametrize("kernels", [DEFAULT_KERNELS, REFERENCE_KERNELS], ids=["fast", "reference"])
def test_kernel_report_passes_gpt_cores_own_kernels_in_every_slot(kernels, torch_references):
    for slot in KERNEL_SLOTS:
        rows = kernel_report(slot, _own(slot, kernels), torch_references, seed=0)
        assert rows and all(row.failure(1e-12) is None for row in rows), (slot, rows)
        names = [row.component for row in rows]
        models = [f"{model}, pattern hooked" if slot == "attention_weights" else model for model in MODELS]
        assert [name for name in names if name.startswith("GPT")] == models * (slot != "sampling_softmax"), slot
        assert [name for name in names if name in sum(STRIDED.values(), MASKED)] == STRIDED.get(slot, []) + MASKED * (
            slot == "sampling_softmax"
        ), slot
    attention = [row.component for row in kernel_report("attention", _own("attention"), torch_references, seed=0)]
    assert [name for name in attention if name.startswith("sdpa")] == [
        name for name in EXPECTED_COMPONENTS if name.startswith("sdpa")
    ] + STRIDED["attention"]
    assert sum(name.startswith("KV-cache") for name in attention) == 3
    without_dropout = kernel_report("attention", lambda q, k, v, causal: _own("attention")(q, k, v, causal),
                                    torch_references, seed=0)  # fmt: skip
    assert [row.component for row in without_dropout] == [name for name in attention if "dropout" not in name]
    rows = kernel_report("attention_weights", _own("attention_weights"), torch_references, seed=0)
    weights = [row.component for row in rows]
    assert weights == [name for name in EXPECTED_COMPONENTS if name.startswith("attention weights")] + STRIDED[
        "attention_weights"
    ] + [f"{model}, pattern hooked" for model in MODELS]


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """`t`'s memory read as if it were laid out contiguously: what a kernel handed data_ptr() without strides reads."""
    return torch.as_strided(t, t.shape, torch.empty(t.shape, device="meta").stride(), t.storage_offset())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    ("slot", "in_the_model"),
    [("attention", True), ("attention_weights", True), ("layer_norm", False), ("gelu", False)],
)
def test_a_kernel_reading_strided_inputs_as_contiguous_with_gradients_on_fails(slot, in_the_model, dtype,
                                                                              torch_references):  # fmt: skip
    """A model hands attention q and k strided, heads of one qkv projection, with gradients on (learned and no
    positions; rope rotates them into copies); every case's were contiguous, and the cached decoding that strides
    them runs without gradients. An attention kernel reading them as if contiguous there, and only there, passed
    verification and trained sort to 0.45 exact match instead of 0.95. It fails the strided cases and the models
    whose positions leave q and k strided; a LayerNorm or GELU doing the same fails its strided case."""
    own, n_strided = getattr(DEFAULT_KERNELS, slot), 2 if slot.startswith("attention") else 1

    def reads_memory_as_if_contiguous(*args, **kwargs):
        if not torch.is_grad_enabled():
            return own(*(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args), **kwargs)
        return own(*map(_as_if_contiguous, args[:n_strided]), *args[n_strided:], **kwargs)

    kernel = functools.wraps(own)(reads_memory_as_if_contiguous)
    rows = kernel_report(slot, kernel, torch_references, dtype=dtype, seed=0)
    failing = [row.component for row in rows if row.failure(1e-4) is not None]
    hooked = ", pattern hooked" if slot == "attention_weights" else ""
    models = [f"{MODELS[0]}{hooked}", f"{MODELS[2]}{hooked}"] if in_the_model else []
    assert failing == STRIDED[slot] + models


def test_a_softmax_that_turns_a_row_starting_with_minus_inf_into_nan_fails_the_masked_cases(torch_references):
    """Top-k sampling masks logits with -inf (generate's next_token), static decoding the unfilled cache slots: an
    online softmax whose running max starts at -inf makes a row whose first chunk is all -inf nan, so `sample
    --top-k 2` drew token 0 in silence. It passed every case of finite logits, and fails each masked one."""

    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        rows = kernel_report("sampling_softmax", online_softmax, torch_references, dtype=dtype, seed=0)
        failures = {row.component: row.failure(2.0**-4) for row in rows}
        assert [name for name, failure in failures.items() if failure is not None] == MASKED, dtype
        assert all(" is nan, expected 0" in failures[name] for name in MASKED), failures


def test_a_kernel_that_writes_into_its_arguments_fails_naming_the_argument_and_the_pass(torch_references):
    """Right values, but the input or the weight changed in place (which corrupts the activations wherever the
    model reads them again): a failure naming it, whose pass does it, never an error of the reference's backward."""

    def gelu_doubling_its_input(x):
        y = DEFAULT_KERNELS.gelu(x)
        with torch.no_grad():
            x.mul_(2)
        return y

    def layer_norm_shifting_its_weight(x, weight, bias, eps=1e-5):
        y = DEFAULT_KERNELS.layer_norm(x, weight, bias, eps)
        weight.data.add_(1.0)  # not even autograd's version counter sees this one
        return y

    class Halving(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return DEFAULT_KERNELS.sampling_softmax(x.detach())

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            with torch.no_grad():
                x.mul_(0.5)
            return torch.zeros_like(dy)

    cases = {
        "gelu": (gelu_doubling_its_input, "the forward changed its argument x in place"),
        "layer_norm": (layer_norm_shifting_its_weight, "the forward changed its argument weight in place"),
        "sampling_softmax": (Halving.apply, "the backward changed the argument x"),
    }
    for dtype in (torch.float64, torch.float32):
        for slot, (kernel, said) in cases.items():
            rows = kernel_report(slot, kernel, torch_references, seed=0, dtype=dtype)
            first = next(row for row in rows if row.failure(1e-4) is not None)
            assert said in first.failure(1e-4), (slot, first)


def test_a_weights_function_that_differs_fails_its_cases_and_the_hooked_model(torch_references):
    """The weights slot is pinned by its own cases and by a model whose `pattern` is hooked, the one place a
    model calls it: weights off by a small amount fail both."""

    def sharpened(q, k, causal):
        weights = DEFAULT_KERNELS.attention_weights(q, k, causal) ** 1.01
        return weights / weights.sum(-1, keepdim=True)

    rows = kernel_report("attention_weights", sharpened, torch_references, seed=0)
    assert all(row.failure(1e-12) is not None for row in rows)
    assert rows[0].failure(1e-12).startswith("attention weights causal: output [")


def test_a_failure_names_the_case_the_output_the_difference_and_where(torch_references):
    def off_at_one_place(q, k, v, causal):
        out = DEFAULT_KERNELS.attention(q, k, v, causal)
        bump = torch.zeros_like(out)
        bump[1, 2, 0, 3] = 0.5
        return out + bump

    rows = {row.component: row for row in kernel_report("attention", off_at_one_place, torch_references, seed=0)}
    message = rows["sdpa causal"].failure(1e-12)
    assert message == "sdpa causal: output [1, 2, 0, 3] differs from sdpa by 5.0e-01, which exceeds the tolerance 1e-12"
    assert rows["sdpa causal"].grad <= 1e-12  # adding a constant leaves every gradient alone


def test_a_backward_that_differs_is_named_by_its_input(torch_references):
    class ForgetsV(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            with torch.enable_grad():
                q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
                out = DEFAULT_KERNELS.attention(q_, k_, v_, True)
            ctx.save_for_backward(q_, k_, v_, out)
            return out.detach()

        @staticmethod
        def backward(ctx, d_out):
            q_, k_, v_, out = ctx.saved_tensors
            d_q, d_k, _ = torch.autograd.grad(out, (q_, k_, v_), d_out)
            return d_q, d_k, torch.zeros_like(v_)

    rows = kernel_report("attention", lambda q, k, v, causal: ForgetsV.apply(q, k, v), torch_references, seed=0)
    first = rows[0]
    assert first.forward <= 1e-12
    assert first.failure(1e-12).startswith("sdpa causal: gradient of v [")


@pytest.mark.parametrize(
    ("kernel", "said"),
    [
        (lambda x: (_ for _ in ()).throw(ValueError("not yet")), "softmax: the forward raised ValueError: not yet"),
        (lambda x: (x, x), "softmax: output is a tuple, not a tensor"),
        (lambda x: x[..., :-1], "softmax: output has shape (2, 7, 10), expected (2, 7, 11)"),
        (lambda x: x.exp() / x.exp().sum(-1, keepdim=True), "softmax, logits x 1000: output ["),
        (lambda x: torch.softmax(x.detach(), -1), "softmax: the backward raised RuntimeError"),
    ],
    ids=["raises", "tuple", "shape", "overflows", "no graph"],
)
def test_a_kernel_that_breaks_is_a_failing_row_not_an_error(kernel, said, torch_references):
    failures = [row.failure(1e-12) for row in kernel_report("sampling_softmax", kernel, torch_references, seed=0)]
    assert any(f is not None and f.startswith(said) for f in failures), failures


def test_a_non_finite_output_is_a_failure_saying_so(torch_references):
    unshifted = lambda x: x.exp() / x.exp().sum(-1, keepdim=True)
    rows = kernel_report("sampling_softmax", unshifted, torch_references, seed=0)
    large = next(row for row in rows if row.component == "softmax, logits x 1000")
    assert large.forward == float("inf")
    assert " is nan, expected " in large.failure(1e-12)
    expected = large.failure(1e-12).split(" is nan, expected ")[1].split(",")[0]
    assert len(expected) <= 12, expected  # the reference value in six significant digits, not all seventeen
    assert rows[0].failure(1e-12) is None  # the naive softmax is right on ordinary logits


def test_kernel_report_refuses_an_unknown_slot(torch_references):
    with pytest.raises(ValueError, match="unknown kernel slot 'linear'"):
        kernel_report("linear", lambda x: x, torch_references)


def test_dropout_report_runs_the_checks_that_hold_for_any_draw_and_only_those(torch_references):
    """What a training step with dropout runs that no comparison of two sets' steps can reach (each draws its own
    masks), for the first-step check to run on the device; float32 by default."""
    draws = [name for name in EXPECTED_COMPONENTS if "dropout" in name and name != "dropout, evaluation"]
    for kernels in (FAST_KERNELS, REFERENCE_KERNELS):
        rows = dropout_report(kernels, torch_references, seed=0)
        assert [row.component for row in rows] == draws
        assert all(row.failure(1e-6) is None for row in rows), rows


# second_derivative_report: a kernel may refuse a second derivative, never answer it wrong --------------------------
SECOND_DERIVATIVES = ["LayerNorm", "GELU (tanh)", "softmax", "cross_entropy (ignore_index)",
                      "dropout, training: y (1-p) + x [y = 0]", "sdpa causal",
                      "sdpa non-causal, 133 positions, head size 5", "attention weights causal"]  # fmt: skip


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-12), (torch.float32, 1e-4)])
def test_the_reference_set_answers_every_second_derivative_as_the_built_ins(dtype, tolerance, torch_references):
    rows = second_derivative_report(torch_references, REFERENCE_KERNELS, seed=0, dtype=dtype)
    assert [row.component for row in rows] == SECOND_DERIVATIVES
    assert all(not row.refused and row.forward <= tolerance and row.grad is None for row in rows), rows


def test_the_fast_sets_hand_written_backwards_refuse_and_the_rest_answer_right(torch_references):
    rows = {row.component: row for row in second_derivative_report(torch_references, FAST_KERNELS, seed=0)}
    refused = {"LayerNorm", "GELU (tanh)", "cross_entropy (ignore_index)", "sdpa causal",
               "sdpa non-causal, 133 positions, head size 5"}  # fmt: skip
    assert {name for name, row in rows.items() if row.refused} == refused
    assert all(row.refused.startswith("RuntimeError: gpt_core.kernels.") for row in rows.values() if row.refused)
    assert all(row.failure(1e-12) is None for row in rows.values())
    assert all(rows[name].forward <= 1e-12 for name in set(rows) - refused)


class _LayerNormDifferentiatedTwice(_LayerNorm):
    backward = staticmethod(_LayerNorm.backward.__wrapped__)  # the fast backward without `differentiates_once`


class _LayerNormOnceDifferentiable(_LayerNorm):
    backward = staticmethod(once_differentiable(_LayerNorm.backward.__wrapped__))


class _LayerNormWithoutGraph(_LayerNorm):
    @staticmethod
    def backward(ctx, *grads):
        with torch.no_grad():  # as a backward computed by a compiled kernel's launch is
            return _LayerNorm.backward.__wrapped__(ctx, *grads)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "function",
    [_LayerNormDifferentiatedTwice, _LayerNormOnceDifferentiable, _LayerNormWithoutGraph],
    ids=["wrong graph", "error node", "no graph"],
)
def test_a_second_derivative_answered_wrong_fails_naming_what_differs(function, dtype, torch_references):
    """Each answers a Hessian-vector product through a model without a word: the fast backward unmarked records a
    graph missing every term through xhat and 1/std; under PyTorch's once_differentiable it records an error node,
    which `autograd.grad` prunes; with no graph at all, the product gets nothing from LayerNorm either way."""
    kernels = dataclasses.replace(FAST_KERNELS, layer_norm=lambda x, w, b, eps: function.apply(x, w, b, eps))
    first_order = kernel_report("layer_norm", kernels.layer_norm, torch_references, seed=0)
    assert all(row.failure(1e-12) is None for row in first_order)  # its first derivatives are right
    (row,) = second_derivative_report(torch_references, kernels, seed=0, slots=("layer_norm",), dtype=dtype)
    assert not row.refused and row.forward > 1e-2
    assert row.failure(1e-4).startswith("LayerNorm: d<grad, u>/d")


class _GELUBackwardRaises(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return REFERENCE_KERNELS.gelu(x.detach())

    @staticmethod
    def backward(ctx, d_out):
        raise ValueError("not written yet")


@pytest.mark.parametrize(
    ("kernel", "said"),
    [
        (lambda x: REFERENCE_KERNELS.gelu(x).detach(), "GELU (tanh): the backward raised RuntimeError: element 0"),
        (lambda x: REFERENCE_KERNELS.gelu(x)[..., :-1], "GELU (tanh): output has shape (2, 7, 31)"),
        (_GELUBackwardRaises.apply, "GELU (tanh): the backward raised ValueError: not written yet"),
    ],
    ids=["no graph at all", "wrong shape", "backward raises"],
)
def test_a_kernel_broken_at_first_order_fails_rather_than_refuses(kernel, said, torch_references):
    """Only recording the first derivative's graph may be refused: a kernel whose first derivative never comes fails."""
    kernels = dataclasses.replace(FAST_KERNELS, gelu=kernel)
    (row,) = second_derivative_report(torch_references, kernels, seed=0, slots=("gelu",))
    assert not row.refused
    assert row.failure(1e-12).startswith(said), row.failure(1e-12)


def test_a_reference_not_differentiable_twice_and_an_unknown_slot_are_errors_naming_them(torch_references):
    def fused(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with pytest.raises(ValueError, match="needs sdpa differentiable twice: RuntimeError: derivative for"):
        second_derivative_report(
            torch_references | {"sdpa": fused}, slots=("attention",)
        )  # the CPU's fused backward: no derivative of its own
    for slots in (("linear",), "gelu"):
        with pytest.raises(ValueError, match="unknown kernel slots"):
            second_derivative_report(torch_references, slots=slots)


def test_a_refused_row_passes_and_says_so_in_a_table_without_a_gradient_column():
    rows = [Row("LayerNorm", "layer_norm", 0.0, None, refused="RuntimeError: no"), Row("GELU", "gelu", 2e-16, None)]
    assert rows[0].failure(0.0) is None
    lines = format_report(rows, first="2nd derivative", grad=False).splitlines()
    assert lines[0].split() == ["component", "reference", "max", "|diff|", "2nd", "derivative"]
    assert lines[2].split() == ["LayerNorm", "layer_norm", "refuses"]
    assert lines[3].split() == ["GELU", "gelu", "2.0e-16"]
    assert format_report(rows).splitlines()[0].split()[-1] == "grad"  # by default, whatever the rows hold
