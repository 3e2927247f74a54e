"""`gpt-train learn check` has no loopholes: a call to the built-in a step is graded against (under any alias, in
every step, the FlashAttention step included), to gpt-core's own kernels or to a shipped solution is reported; a
hand-written backward that asks autograd is refused; large logits fail a logsumexp without the max shift; the dtype,
the shape, None and a detached output are each named before any value is compared; and the common wrong forms are
named, written as a learner writes them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from learn_transcript import write

from gpt_train.cli.learn import learn
from gpt_train.learn.grader import check_file, grade
from gpt_train.learn.solutions.layer_norm_backward import LayerNorm as LayerNormByHand
from gpt_train.learn.steps import BY_NAME


def _end_aligned(q, k, causal):
    if not causal:
        return None
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_end_aligned(q, k, causal))


def _layer_norm_formula(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt((x - mean).square().mean(dim=-1, keepdim=True) + eps) * weight
    return y if bias is None else y + bias


def _attention_formula(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = _end_aligned(q, k, causal)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True) @ v


class _LayerNormBuiltinForward(LayerNormByHand):
    """F.layer_norm in the forward, the answer's hand-written backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        LayerNormByHand.forward(ctx, x, weight, bias, eps)  # saves what the backward needs
        return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


class _AttentionBuiltinForward(torch.autograd.Function):
    """F.scaled_dot_product_attention in the forward, a right hand-written backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = _end_aligned(q, k, causal)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        e = (scores - scores.amax(-1, keepdim=True)).exp()
        ctx.save_for_backward(q, k, v, e / e.sum(-1, keepdim=True))
        return _sdpa(q, k, v, causal)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, p = ctx.saved_tensors
        s = 1.0 / math.sqrt(q.shape[-1])
        d_p = d_out @ v.transpose(-2, -1)
        d_s = p * (d_p - (d_p * p).sum(-1, keepdim=True))
        return d_s @ k * s, d_s.transpose(-2, -1) @ q * s, p.transpose(-2, -1) @ d_out, None


BUILTIN_IN_EACH_STEP = {
    "softmax": (lambda x: torch.softmax(x, dim=-1), "torch.softmax"),
    "attention": (_sdpa, "F.scaled_dot_product_attention"),
    "layer_norm": (lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps), "F.layer_norm"),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"), "F.gelu"),
    "cross_entropy": (lambda logits, targets: F.cross_entropy(logits, targets), "F.cross_entropy"),
    "layer_norm_backward": (lambda x, w, b, eps: _LayerNormBuiltinForward.apply(x, w, b, eps), "F.layer_norm"),
    "attention_backward": (lambda q, k, v, causal: _AttentionBuiltinForward.apply(q, k, v, causal),
                           "F.scaled_dot_product_attention"),
    "flash_attention": (_sdpa, "F.scaled_dot_product_attention"),
}  # fmt: skip


@pytest.mark.parametrize("step", list(BUILTIN_IN_EACH_STEP))
def test_a_call_to_the_builtin_a_step_is_graded_against_fails_it_in_every_step(step):
    kernel, name = BUILTIN_IN_EACH_STEP[step]
    verdict = grade(BY_NAME[step], kernel)
    assert not verdict.passed
    function = BY_NAME[step].function
    assert verdict.message.startswith(f"{step}: your {function} calls {name}, the built-in it is graded against; ")
    assert len(verdict.message.splitlines()) == 1


def test_flash_attention_calling_the_fused_builtin_is_reported_not_passed_by_the_tile_guard(tmp_path):
    """PyTorch's fused kernel makes its (T, T) scores where the tile guard cannot see them: through the CLI."""
    write(
        tmp_path,
        "flash_attention",
        "import torch.nn.functional as F\n\n\ndef attention(q, k, v, causal):\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal and q.shape[-2] == k.shape[-2])\n",
    )
    result = CliRunner().invoke(learn, ["check", "flash_attention", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "your attention calls F.scaled_dot_product_attention, the built-in it is graded against" in result.output


def _softmax_by_log_softmax(x):
    return torch.log_softmax(x, dim=-1).exp()


class _Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.nn.Softmax(dim=-1)(x)


SOFTMAX_ALIASES = {
    "F.softmax": (lambda x: F.softmax(x, dim=-1), "F.softmax"),
    "a method": (lambda x: x.softmax(-1), "Tensor.softmax"),
    "torch.special": (lambda x: torch.special.softmax(x, -1), "torch.special.softmax"),
    "an nn.Module": (_Softmax(), "F.softmax"),
    "the ATen operator": (lambda x: torch.ops.aten._softmax(x, -1, False), "torch.softmax"),
    "log_softmax then exp": (_softmax_by_log_softmax, "torch.log_softmax"),
}


@pytest.mark.parametrize("alias", list(SOFTMAX_ALIASES))
def test_the_builtin_is_reported_under_any_alias(alias):
    kernel, name = SOFTMAX_ALIASES[alias]
    verdict = grade(BY_NAME["softmax"], kernel)
    assert not verdict.passed
    assert verdict.message.startswith(f"softmax: your softmax calls {name}, the built-in it is graded against")


def test_attention_calling_torch_softmax_is_reported_as_a_builtin_the_course_has_youwrite():
    def attention(q, k, v, causal):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = _end_aligned(q, k, causal)
        scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    verdict = grade(BY_NAME["attention"], attention)
    assert verdict.message == ("attention: your attention calls torch.softmax, a built-in this course has you write; "
                               "write it from exp and sum")  # fmt: skip


SHIPPED = {
    "gpt-core's reference kernel": ("from gpt_core.reference import softmax\n",
                                    "gpt_core.reference.softmax, gpt-core's own code"),
    "gpt-core's fast kernel, called": ("import gpt_core\n\n\ndef softmax(x):\n    return gpt_core.softmax(x)\n",
                                       "gpt_core.kernels.softmax.softmax, gpt-core's own code"),
    "the shipped solution": ("from gpt_train.learn.solutions.softmax import softmax\n",
                             "gpt_train.learn.solutions.softmax.softmax, the shipped solution"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(SHIPPED))
def test_gpt_cores_kernels_and_the_shipped_solutions_called_from_the_learners_file_are_reported(tmp_path, what):
    source, said = SHIPPED[what]
    verdict = check_file(BY_NAME["softmax"], write(tmp_path, "softmax", source))
    assert not verdict.passed
    assert verdict.message == f"softmax: your softmax calls {said}; write it yourself in your file"


def test_the_shipped_flash_solution_imported_is_reported(tmp_path):
    path = write(tmp_path, "flash_attention", "from gpt_train.learn.solutions.flash_attention import attention\n")
    verdict = check_file(BY_NAME["flash_attention"], path)
    assert verdict.message == ("flash_attention: your attention calls gpt_train.learn.solutions.flash_attention."
                               "attention, the shipped solution; write it yourself in your file")  # fmt: skip


# autograd inside a hand-written backward -------------------------------------------------------------------------
def _layer_norm_asking(ask: str):
    class LayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, eps):
            ctx.save_for_backward(x, weight, bias if bias is not None else x.new_zeros(x.shape[-1]))
            ctx.eps, ctx.has_bias = eps, bias is not None
            return _layer_norm_formula(x, weight, bias, eps)

        @staticmethod
        def backward(ctx, dy):
            x, weight, bias = ctx.saved_tensors
            leaves = [t.detach().requires_grad_() for t in (x, weight, bias)]

            def again(x, weight, bias):
                return _layer_norm_formula(x, weight, bias, ctx.eps)

            if ask == "torch.func.vjp":
                grads = torch.func.vjp(again, *leaves)[1](dy)
            else:
                with torch.enable_grad():
                    y = again(*leaves)
                    if ask == "torch.autograd.grad":
                        grads = torch.autograd.grad(y, leaves, dy)
                    else:
                        y.backward(dy)
                        grads = [t.grad for t in leaves]
            return grads[0], grads[1], grads[2] if ctx.has_bias else None, None

    return lambda x, weight, bias, eps: LayerNorm.apply(x, weight, bias, eps)


@pytest.mark.parametrize("ask", ["torch.autograd.grad", ".backward()", "torch.func.vjp"])
def test_a_hand_written_backward_that_asks_autograd_is_refused(ask):
    verdict = grade(BY_NAME["layer_norm_backward"], _layer_norm_asking(ask))
    assert not verdict.passed
    assert verdict.message == (
        f"layer_norm_backward: your layer_norm calls {ask}, so autograd derives its gradient: "
        "write the backward by hand from the saved tensors, with no autograd inside it"
    )


class _AttentionAskingAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        ctx.save_for_backward(q, k, v)
        ctx.causal = causal
        return _attention_formula(q, k, v, causal)

    @staticmethod
    def backward(ctx, d_out):
        leaves = [t.detach().requires_grad_() for t in ctx.saved_tensors]
        with torch.enable_grad():
            return (*torch.autograd.grad(_attention_formula(*leaves, ctx.causal), leaves, d_out), None)


def test_attention_whose_backward_asks_autograd_is_refused():
    verdict = grade(
        BY_NAME["attention_backward"], lambda q, k, v, causal: _AttentionAskingAutograd.apply(q, k, v, causal)
    )
    assert verdict.message.startswith("attention_backward: your attention calls torch.autograd.grad, so autograd ")


R11 = """import torch, torch.nn.functional as F
def _sdpa(q, k, v, causal):
    if causal and q.shape[-2] < k.shape[-2]:
        n = k.shape[-2] - q.shape[-2]
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril(n)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
class A(torch.autograd.Function):            # a "hand-written backward" that asks autograd
    @staticmethod
    def forward(ctx, q, k, v, causal):
        ctx.save_for_backward(q, k, v); ctx.causal = causal; return _sdpa(q, k, v, causal)
    @staticmethod
    def backward(ctx, g):
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
            return (*torch.autograd.grad(_sdpa(q, k, v, ctx.causal), (q, k, v), g), None)
def attention(q, k, v, causal):
    return A.apply(q, k, v, causal)
"""
"""The hostile round's file (r11): the fused built-in inside a Function whose backward asks autograd."""


@pytest.mark.parametrize("step", ["attention_backward", "flash_attention"])
def test_a_function_around_the_builtin_whose_backward_asks_autograd_is_refused(tmp_path, step):
    verdict = check_file(BY_NAME[step], write(tmp_path, step, R11))
    assert verdict.message.startswith(f"{step}: your attention calls F.scaled_dot_product_attention, ")


def test_a_file_that_replaces_part_of_the_grader_fails(tmp_path):
    source = ("import gpt_train.learn.grader as g\ng.first_failure = lambda rows, tolerance=None: None\n\n\n"
              "def softmax(x):\n    return x * 0 + 1\n")  # fmt: skip
    path = write(tmp_path, "softmax", source)
    verdict = check_file(BY_NAME["softmax"], path)
    assert verdict == type(verdict)(False, f"{path}: it replaced gpt_train.learn.grader.first_failure, a part of "
                                           "the check: leave the grader alone")  # fmt: skip


# large logits --------------------------------------------------------------------------------------------------
def test_a_cross_entropy_without_the_max_shift_fails_on_large_logits_and_is_named(tmp_path):
    source = (
        "def cross_entropy(logits, targets):\n    scored = targets != -100\n"
        "    logits, targets = logits[scored], targets[scored]\n"
        "    return (logits.exp().sum(-1).log() - logits.gather(-1, targets[:, None])[:, 0]).mean()\n"
    )
    verdict = check_file(BY_NAME["cross_entropy"], write(tmp_path, "cross_entropy", source))
    lines = verdict.message.splitlines()
    assert lines[0].startswith("cross_entropy: no max shift: log(sum(exp(logits))) overflows on large logits")
    assert lines[1].startswith("  first difference: cross_entropy, ignore_index, logits x 1000: output [] is inf")


def test_a_softmax_without_the_max_shift_written_another_way_is_named():
    def softmax(x):
        e = torch.exp(x)
        return e * (1.0 / torch.sum(e, dim=-1, keepdim=True))

    verdict = grade(BY_NAME["softmax"], softmax)
    assert verdict.message.splitlines()[0] == (
        "softmax: softmax without subtracting the max overflows on large logits: exp(1000) is inf"
    )


# structure before values ---------------------------------------------------------------------------------------
def _softmax_then(then):
    def softmax(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return then(e / e.sum(-1, keepdim=True))

    return softmax


STRUCTURE = {
    "float32 for float64": (_softmax_then(lambda p: p.float()),
                            "softmax: your softmax returns float32 for float64 inputs: keep the inputs' dtype"),
    "None": (_softmax_then(lambda p: None), "softmax: your softmax returns None: `return` the result"),
    "detached": (_softmax_then(lambda p: p.detach()),
                 "softmax: your output is detached from its inputs, so no gradient can flow"),
    "a wrong shape": (_softmax_then(lambda p: p.sum(-1)),
                      "softmax: your softmax returns shape (2, 7) where (2, 7, 11) is expected (softmax)"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(STRUCTURE))
def test_dtype_shape_none_and_a_detached_output_are_each_named_before_the_values(what):
    kernel, said = STRUCTURE[what]
    verdict = grade(BY_NAME["softmax"], kernel)
    assert not verdict.passed
    assert verdict.message.startswith(said) and len(verdict.message.splitlines()) == 1, verdict.message


class _LayerNormNoWeightGradient(LayerNormByHand):
    @staticmethod
    def backward(ctx, dy):
        return LayerNormByHand.backward(ctx, dy)[0], None, None, None


def test_a_hand_written_backward_returning_none_for_a_gradient_is_named():
    verdict = grade(BY_NAME["layer_norm_backward"], lambda x, w, b, eps: _LayerNormNoWeightGradient.apply(x, w, b, eps))
    assert verdict.message == ("layer_norm_backward: your backward returns None for the gradient of weight: return "
                               "one gradient per input")  # fmt: skip


# the common forms, written as a learner writes them --------------------------------------------------------------
ATTENTION_BACKWARD = """import math

import torch


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            tq, tk = s.shape[-2:]
            s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq), float("-inf"))
        e = (s - s.amax(-1, keepdim=True)).exp()
        p = e / e.sum(-1, keepdim=True)
        ctx.save_for_backward(q, k, v, p)
        return p @ v

    @staticmethod
    def backward(ctx, do):
        q, k, v, p = ctx.saved_tensors
        scale = 1 / math.sqrt(q.shape[-1])
        dv = p.transpose(-2, -1) @ do
        dp = do @ v.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq = ds @ k * scale
        dk = ds.transpose(-2, -1) @ q * scale
        return dq, dk, dv, None


def attention(q, k, v, causal):
    return Attention.apply(q, k, v, causal)
"""

FORMS = {
    "the scale after the softmax": ("attention", '''import math

import torch


def attention(q, k, v, causal):
    s = q @ k.transpose(-2, -1)
    if causal:
        tq, tk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq), float("-inf"))
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    w = e / e.sum(dim=-1, keepdim=True)
    return (w @ v) / math.sqrt(q.shape[-1])
''', "attention: the scale is applied after the softmax"),
    "LayerNorm over the wrong axis": ("layer_norm", '''import torch


def layer_norm(x, weight, bias, eps):
    mean = x.mean(dim=0, keepdim=True)
    var = x.var(dim=0, keepdim=True, unbiased=False)
    y = (x - mean) / torch.sqrt(var + eps) * weight
    return y if bias is None else y + bias
''', "layer_norm: LayerNorm over the wrong axis"),
    "-100 clamped to class 0": ("cross_entropy", '''def cross_entropy(logits, targets):
    m = logits.max(dim=-1, keepdim=True).values
    lse = (logits - m).exp().sum(dim=-1, keepdim=True).log() + m
    picked = logits.gather(1, targets.clamp(min=0).unsqueeze(1))
    return (lse - picked).mean()
''', "cross_entropy: targets of -100 were clamped to class 0 and scored"),
    "tanh as (e^u - e^-u) / (e^u + e^-u)": ("gelu", '''import math

import torch


def gelu(x):
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    tanh = (torch.exp(u) - torch.exp(-u)) / (torch.exp(u) + torch.exp(-u))
    return 0.5 * x * (1 + tanh)
''', "gelu: tanh written with exp overflows on large inputs (inf / inf): use torch.tanh"),
    "GELU's constant rounded": ("gelu", '''import torch


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
''', "gelu: a constant is mistyped or rounded: sqrt(2/pi) = 0.7978845608028654"),
    "GELU's cubic constant mistyped": ("gelu", '''import math

import torch


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.047715 * x ** 3)))
''', "gelu: a constant is mistyped or rounded"),
    "dK = dS Q without the transpose": ("attention_backward",
                                        ATTENTION_BACKWARD.replace("dk = ds.transpose(-2, -1) @ q", "dk = ds @ q"),
                                        "attention_backward: dK = dS Q is missing the transpose"),
    "dV = P dO": ("attention_backward", ATTENTION_BACKWARD.replace("dv = p.transpose(-2, -1) @ do", "dv = p @ do"),
                  "attention_backward: dV = P dO is missing the transpose"),
}  # fmt: skip


@pytest.mark.parametrize("form", list(FORMS))
def test_a_common_wrong_form_written_as_a_learner_writes_it_is_named(tmp_path, form):
    step, source, said = FORMS[form]
    verdict = check_file(BY_NAME[step], write(tmp_path, step, source))
    assert not verdict.passed
    assert verdict.message.splitlines()[0].startswith(said), verdict.message


def test_the_learner_style_attention_backward_passes(tmp_path):
    verdict = check_file(BY_NAME["attention_backward"], write(tmp_path, "attention_backward", ATTENTION_BACKWARD))
    assert verdict.passed, verdict.message
