"""`gpt-train learn check` grades every path a learner's code takes where the course's code takes it: a kernel in
float32 as well as float64 (its dtype and its values), softmax on the (B, V) logits generation samples from, layer_norm
with an eps other than 1e-5, a hand-written backward on every case (no bias, not causal, float32), the GPT called
without targets, top-k of the vocabulary's size or more, and a training step's gradients cleared between steps."""

from __future__ import annotations

import math

import pytest
import torch
from learn_transcript import answer, checked, write

from gpt_train.learn.grader import check_file, grade
from gpt_train.learn.steps import BY_NAME


def _softmax(x):
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _softmax_in_float64(x):
    return _softmax(x.double())


def _cross_entropy_summed_in_float64(logits, targets):
    """The reviewer's: a float64 accumulator, so a float32 loss comes back float64."""
    keep = targets != -100
    logits, targets = logits[keep], targets[keep]
    m = logits.amax(-1, keepdim=True)
    lse = m + (logits - m).exp().sum(-1, keepdim=True).log()
    total = torch.zeros((), dtype=torch.float64, device=logits.device)
    return (total + (lse - logits.gather(-1, targets[:, None])).sum()) / targets.numel()


@pytest.mark.parametrize(
    ("step", "kernel"),
    [("softmax", _softmax_in_float64), ("cross_entropy", _cross_entropy_summed_in_float64)],
    ids=["softmax by .double()", "cross_entropy summed in float64"],
)
def test_a_kernel_returning_float64_for_float32_inputs_fails_naming_the_dtype(step, kernel):
    """Graded in float64 alone, both passed, then failed in a float32 model."""
    verdict = grade(BY_NAME[step], kernel)
    assert not verdict.passed
    assert verdict.message == (f"{step}: your {step} returns float64 for float32 inputs: keep the inputs' dtype (no "
                               ".float() or .double(); dtype=x.dtype for a tensor you make)")  # fmt: skip


def _attention_with_a_float64_mask(q, k, v, causal):
    """The reviewer's: an additive mask made in float64 turns float32 scores into float64, which meet v."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        tq, tk = scores.shape[-2:]
        future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq).logical_not()
        scores = scores + torch.zeros(tq, tk, dtype=torch.float64, device=q.device).masked_fill(future, -math.inf)
    return _softmax(scores) @ v


def test_a_kernel_that_raises_on_float32_inputs_alone_says_so_in_one_line():
    verdict = grade(BY_NAME["attention"], _attention_with_a_float64_mask)
    assert not verdict.passed
    assert verdict.message.startswith("your kernel: attention raised RuntimeError: ")
    assert verdict.message.endswith(" on float32 inputs, where float64 ones run: make each tensor it creates in the "
                                    "inputs' dtype (dtype=x.dtype), not float64")  # fmt: skip
    assert len(verdict.message.splitlines()) == 1


def _softmax_rounded_in_float32(x):
    """Right in float64; in float32 it computes in bfloat16, off by far more than float32's rounding."""
    return _softmax(x.bfloat16()).float() if x.dtype == torch.float32 else _softmax(x)


def test_a_kernel_right_in_float64_and_wrong_in_float32_fails_its_float32_values():
    verdict = grade(BY_NAME["softmax"], _softmax_rounded_in_float32)
    assert not verdict.passed
    assert verdict.message.startswith("softmax: softmax, in float32: output ")
    assert verdict.message.endswith("which exceeds the tolerance 1e-04")


@pytest.mark.parametrize("step", [step.name for step in BY_NAME.values() if step.kind == "kernel"])
def test_each_kernel_steps_answer_passes_in_float32_within_its_tolerance(tmp_path, step):
    verdict = check_file(BY_NAME[step], write(tmp_path, step, answer(step)))
    assert verdict.passed, verdict.message
    largest = float(verdict.message.rpartition(" in float32, largest difference ")[2])
    assert largest <= 1e-5  # FP32_TOLERANCE, 1e-4, with room to spare


def _softmax_over_dim_2(x):
    e = (x - x.amax(dim=2, keepdim=True)).exp()
    return e / e.sum(dim=2, keepdim=True)


def _softmax_over_three_dims(x):
    B, T, V = x.shape  # every check's logits were (B, T, V)
    return _softmax(x.reshape(B * T, V)).reshape(B, T, V)


@pytest.mark.parametrize(
    ("kernel", "said"),
    [(_softmax_over_dim_2, "softmax raised IndexError: Dimension out of range"),
     (_softmax_over_three_dims, "softmax raised ValueError: not enough values to unpack")],
    ids=["dim=2", "(B, T, V) unpacked"],
)  # fmt: skip
def test_a_softmax_that_works_on_three_dimensions_alone_fails_on_the_logits_generation_samples_from(kernel, said):
    """The slot `sampling_softmax` is called on (B, V) logits by gpt_core's generate."""
    verdict = grade(BY_NAME["softmax"], kernel)
    assert not verdict.passed
    assert verdict.message.startswith(f"your kernel: {said}"), verdict.message


def _layer_norm_eps_ignored(x, weight, bias, eps):
    """The reviewer's: 1e-5 written in, the argument eps never read."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).square().mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5) * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize("step", ["layer_norm", "layer_norm_backward"])
def test_a_layer_norm_ignoring_its_eps_is_named(step):
    """Every case's eps was 1e-5, so it passed."""
    verdict = grade(BY_NAME[step], _layer_norm_eps_ignored)
    assert not verdict.passed
    assert verdict.message.splitlines()[0] == (
        f"{step}: the argument eps is ignored, a constant 1e-5 in its place: divide by sqrt(var + eps) with the eps "
        "the caller passes"
    )


LAYER_NORM_BY_HAND = """import torch


class LN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        c = x - x.mean(-1, keepdim=True)
        rstd = (c.square().mean(-1, keepdim=True) + eps).rsqrt()
        xhat = c * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.has_bias = bias is not None
        return xhat * weight + bias if ctx.has_bias else xhat * weight

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, weight = ctx.saved_tensors
        g = dy * weight
        dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        rows = (-1, dy.shape[-1])
        return dx, (dy * xhat).reshape(rows).sum(0), dy.reshape(rows).sum(0) if ctx.has_bias else None, None


def layer_norm(x, weight, bias, eps):
    if PLAIN:  # plain ops: autograd's backward
        m = x.mean(-1, keepdim=True)
        y = (x - m) / torch.sqrt((x - m).square().mean(-1, keepdim=True) + eps) * weight
        return y if bias is None else y + bias
    return LN.apply(x, weight, bias, eps)
"""

ATTENTION_BY_HAND_WHEN_CAUSAL = """import torch


class Att(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scale = q.shape[-1] ** -0.5
        s = q @ k.transpose(-2, -1) * scale
        tq, tk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq), float("-inf"))
        e = (s - s.amax(-1, keepdim=True)).exp()
        p = e / e.sum(-1, keepdim=True)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return p @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, p = ctx.saved_tensors
        dp = do @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        return ds @ k * ctx.scale, ds.transpose(-2, -1) @ q * ctx.scale, p.transpose(-2, -1) @ do


def attention(q, k, v, causal):
    if causal:
        return Att.apply(q, k, v)
    s = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True) @ v
"""
"""The reviewer's two: the hand-written Function on one branch, plain autograd on another."""


@pytest.mark.parametrize(
    ("step", "source", "case"),
    [("layer_norm_backward", LAYER_NORM_BY_HAND.replace("PLAIN", "bias is None"), "LayerNorm without bias"),
     ("layer_norm_backward", LAYER_NORM_BY_HAND.replace("PLAIN", "x.dtype == torch.float32"),
      "LayerNorm, in float32"),
     ("attention_backward", ATTENTION_BY_HAND_WHEN_CAUSAL, "sdpa non-causal")],
    ids=["no bias", "float32", "not causal"],
)  # fmt: skip
def test_a_hand_written_backward_that_leaves_a_branch_to_autograd_is_refused(tmp_path, step, source, case):
    """Only the first case was looked at: a backward of autograd's on the other branches passed."""
    verdict = check_file(BY_NAME[step], write(tmp_path, step, source))
    assert not verdict.passed
    assert verdict.message.startswith(f"{step}: autograd derived this backward ({case}): "), verdict.message


MODEL_WITHOUT_TARGETS = {
    "the loss computed whatever the targets": (
        ("        if targets is None:\n            return logits, None\n", ""),
        "model: your GPT raised AttributeError: 'NoneType' object has no attribute 'reshape' on model(idx, None), as "
        "learn train's evaluation calls it: with no targets there is no loss, return (logits, None)"),
    "the logits alone": (
        ("            return logits, None\n", "            return logits\n"),
        "model: your GPT returns a Tensor on model(idx, None), as learn train's evaluation calls it: return the pair "
        "(logits, None)"),
    "a loss of 0": (
        ("            return logits, None\n", "            return logits, logits.sum() * 0\n"),
        "model: your GPT returns a loss (Tensor) on model(idx, None), as learn train's evaluation calls it: with no "
        "targets there is no loss, return (logits, None)"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(MODEL_WITHOUT_TARGETS))
def test_a_gpt_that_does_not_give_logits_and_none_without_targets_fails(tmp_path, what):
    """It passed, then crashed in `learn train`, whose evaluation calls the GPT without targets."""
    replacement, said = MODEL_WITHOUT_TARGETS[what]
    verdict = checked(tmp_path, "model", replacement)
    assert not verdict.passed
    assert verdict.message == said


def test_a_gpt_whose_logits_without_targets_differ_from_gpt_cores_fails(tmp_path):
    verdict = checked(tmp_path, "model", ("            return logits, None\n", "            return logits * 2, None\n"))
    assert not verdict.passed
    assert verdict.message.startswith("model: 2 layers, 12 positions: logits with targets=None "), verdict.message


def test_generation_with_top_k_of_the_vocabulary_or_more_keeps_every_token(tmp_path):
    """gpt-core's generate takes top_k >= V and keeps every token; an answer without the top_k < V guard passed."""
    verdict = checked(tmp_path, "generation", ("top_k is not None and top_k < logits.shape[-1]", "top_k"))
    assert not verdict.passed
    lines = verdict.message.splitlines()
    assert lines[0] == (
        "generation: a top_k of V (the vocabulary's size) or more keeps every token, as gpt-core's generate does: "
        "mask only when top_k < V (logits.topk(k) raises for k > V)"
    )
    assert lines[1].endswith("generate raised RuntimeError: selected index k out of range")


def test_a_training_step_that_never_clears_the_gradients_is_named(tmp_path):
    """It failed with a bare numeric difference."""
    verdict = checked(tmp_path, "training_step", ("        param.grad = None\n", "        pass\n"))
    assert not verdict.passed
    assert verdict.message.splitlines()[0] == (
        "training_step: the gradients are never cleared: set param.grad = None (or zero them) before backward(), or "
        "each step adds to the last's"
    )
