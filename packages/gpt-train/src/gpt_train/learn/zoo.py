"""The classic mistakes of each step, most of them the step's answer with an edit or two, as a learner makes them. A
failing kernel is named after the first mistake it agrees with on every case (outputs, and for a backward mistake
every gradient; raising the same way counts); a mistake many kernels make (an overflow) is recognised by `matches`."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from gpt_train.learn.cases import Case, Outcome, close
from gpt_train.learn.devices import Origin, made_on_cpu
from gpt_train.learn.loading import load_module
from gpt_train.learn.steps import BY_NAME, SOLUTIONS

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715

Matcher = Callable[[list[Case], list[Outcome], list[Outcome]], bool]  # (cases, the kernel's, the right outcomes)


@dataclass(frozen=True)
class Mistake:
    key: str
    message: str
    kernels: tuple[Callable[..., Tensor], ...]
    backward: bool = False  # matched on the gradients too
    tiled: bool = False  # its kernels take the learner's tile size, `tile=`
    matches: Matcher | None = None  # how it is recognised, when not by agreeing with one of its kernels


def _overflows(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> bool:
    """Right wherever its output is finite, and not finite where the right one is: exact on paper, overflowing."""
    overflowed = False
    for got, want in zip(outcomes, expected, strict=True):
        if got.error is not None or got.output is None or got.output.shape != want.output.shape:
            return False
        if bool(got.output.isfinite().all()):
            if not close(got.output, want.output):
                return False
        elif bool(want.output.isfinite().all()):
            overflowed = True
    return overflowed


_DEVICE_MISMATCH = re.compile(r"on the same device|not on the expected device", re.IGNORECASE)


def _meets_another_device(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> bool:
    """A case raised PyTorch's device mismatch: tensors made without device= land on the default device, which
    torch.set_default_device can make another than the inputs'. Where the default is the CPU, the device check
    (`devices`) names the same mistake; its kernels, right on the CPU, never name a kernel by its results."""
    return any(got.error is not None and _DEVICE_MISMATCH.search(str(got.error)) for got in outcomes)


def _answer(step: str, *edits: tuple[str, str]) -> Any:
    path = SOLUTIONS / f"{step}.py"
    source = path.read_text(encoding="utf-8")
    for old, new in edits:
        if old not in source:
            raise ValueError(f"{path} holds no {old!r}")
        source = source.replace(old, new)
    return getattr(load_module(path, source.encode()), BY_NAME[step].function)


def _tiled(*edits: tuple[str, str]) -> Callable[..., Tensor]:
    attention = _answer("flash_attention", *edits)

    def tiled(q: Tensor, k: Tensor, v: Tensor, causal: bool, tile: int) -> Tensor:
        attention.__globals__["TILE"] = tile
        return attention(q, k, v, causal)

    return tiled


_SHIFTED = "(x - x.amax(dim=-1, keepdim=True))"
SOFTMAX = (
    Mistake("global_max", "the max is taken over the whole tensor, not each row: a row far below it underflows, "
            "its exps are all 0 and 0 / 0 is nan", (_answer("softmax", ("x.amax(dim=-1, keepdim=True)", "x.amax()")),)),
    Mistake("no_max_shift", "softmax without subtracting the max overflows on large logits: exp(1000) is inf",
            (_answer("softmax", (_SHIFTED + ".exp()", "x.exp()")),), matches=_overflows),
    Mistake("wrong_axis", "softmax over the wrong axis: each row of the last dim must sum to 1",
            (_answer("softmax", ("dim=-1", "dim=0")), _answer("softmax", ("dim=-1", "dim=1")))),
    Mistake("not_normalised", "exp(x - max) is never divided by its sum: the weights must sum to 1",
            (_answer("softmax", ("return exp / exp.sum(dim=-1, keepdim=True)", "return exp")),)),
    Mistake("log_softmax", "this is log-softmax: the slot wants the probabilities themselves",
            (_answer("softmax", ("return exp / exp.sum(", f"return {_SHIFTED} - exp.sum("),
                     ("keepdim=True)\n", "keepdim=True).log()\n")),)),
)  # fmt: skip


_attention = functools.partial(_answer, "attention")
_SCALE, _MASK = " / q.shape[-1] ** 0.5", ".tril(n_keys - n_queries)"
ATTENTION = (
    Mistake("scale_d", "your scores are divided by d, not sqrt(d)", (_attention((_SCALE, " / q.shape[-1]")),)),
    Mistake("no_scale", "your scores are not scaled: divide q k^T by sqrt(d)", (_attention((_SCALE, "")),)),
    Mistake("no_mask", "no mask: queries see the future", (_attention(("if causal:", "if False:")),)),
    Mistake("mask_shifted", "position i sees position i+1: the mask is shifted by one",
            (_attention((_MASK, ".tril(n_keys - n_queries + 1)")),)),
    Mistake("mask_hides_self", "position i does not see itself: the mask must keep the diagonal",
            (_attention((_MASK, ".tril(n_keys - n_queries - 1)")),)),
    Mistake("mask_top_left", "the mask is aligned to the start of the keys: with Tq < Tk (cached decoding) query i "
            "sits at position Tk - Tq + i", (_attention((_MASK, ".tril(0)")),)),
    Mistake("mask_without_causal", "causal=False still masks: only causal attention hides the future",
            (_attention(("if causal:", "if True:")),)),
    Mistake("mask_fills_zero", "masked scores are set to 0, not -inf: exp(0) = 1 still weights the future",
            (_attention(('float("-inf")', "0.0")),)),
    Mistake("mask_after_softmax", "the mask is applied after the softmax: the weights left no longer sum to 1",
            (_attention(('scores = scores.masked_fill(~allowed, float("-inf"))', "pass"),
                        ("keepdim=True) @ v", "keepdim=True) * (allowed if causal else 1) @ v")),)),
    Mistake("softmax_over_queries", "softmax over the wrong axis: each query's weights over the keys (the last "
            "dim) must sum to 1", (_attention(("dim=-1", "dim=-2")),)),
    Mistake("scale_after_softmax", "the scale is applied after the softmax: divide the scores q k^T by sqrt(d) "
            "before it, so that it shapes the weights",
            (_attention((_SCALE, ""), ("keepdim=True) @ v", "keepdim=True)" + _SCALE + " @ v")),)),
    Mistake("mask_on_cpu", made_on_cpu(BY_NAME["attention"], Origin("torch.ones")),
            (_attention((", device=q.device)", ")")),), matches=_meets_another_device),
)  # fmt: skip


_layer_norm = functools.partial(_answer, "layer_norm")
LAYER_NORM = (
    Mistake("eps_outside", "epsilon outside the square root: divide by sqrt(var + eps)",
            (_layer_norm(("torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)")),)),
    Mistake("unbiased", "unbiased variance: LayerNorm divides by C, not C-1",
            (_layer_norm(("square().mean(dim=-1, keepdim=True)",
                          "square().sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)")),)),
    Mistake("no_eps", "epsilon is missing: divide by sqrt(var + eps)", (_layer_norm(("var + eps", "var")),)),
    Mistake("eps_ignored", "the argument eps is ignored, a constant 1e-5 in its place: divide by sqrt(var + eps) with "
            "the eps the caller passes", (_layer_norm(("var + eps", "var + 1e-5")),)),
    Mistake("no_root", "divided by the variance, not its square root",
            (_layer_norm(("torch.sqrt(var + eps)", "(var + eps)")),)),
    Mistake("no_bias", "the bias is never added", (_layer_norm(("y if bias is None else y + bias", "y")),)),
    Mistake("wrong_axis", "LayerNorm over the wrong axis: normalise each position's features, the last dimension "
            "(dim=-1, keepdim=True)", tuple(_layer_norm(("dim=-1", f"dim={dims}"))
                                            for dims in ("0", "1", "tuple(range(x.dim()))", "(-2, -1)"))),
)  # fmt: skip


def _gelu_tanh_by_exp(x: Tensor) -> Tensor:
    e = (2.0 * _GELU_C * (x + _GELU_A * x**3)).exp()
    return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0))


def _gelu_tanh_by_exp_pair(x: Tensor) -> Tensor:
    """tanh(u) = (e^u - e^-u) / (e^u + e^-u): exact, and inf / inf once |u| > 710."""
    u = _GELU_C * (x + _GELU_A * x**3)
    return 0.5 * x * (1.0 + (u.exp() - (-u).exp()) / (u.exp() + (-u).exp()))


def _gelu_constant_mistyped(cases: list[Case], outcomes: list[Outcome], expected: list[Outcome]) -> bool:
    """The tanh form with c = sqrt(2/pi) or a = 0.044715 near but not right, (c, a) fitted to the first case by least
    squares on atanh(2 y / x - 1) = c x + c a x^3 where tanh is far from saturating."""
    if outcomes[0].error is not None or outcomes[0].output is None:
        return False
    x, y = cases[0].args[0].detach(), outcomes[0].output.detach().double()
    if y.shape != x.shape:
        return False
    t = 2.0 * y / x - 1.0
    usable = (x.abs() > 0.1) & (t.abs() < 0.9)
    if int(usable.sum()) < 8:
        return False
    x, u = x[usable], torch.atanh(t[usable])
    design = torch.stack((x, x**3), dim=-1)
    fitted = torch.linalg.lstsq(design, u[:, None]).solution[:, 0]
    if not bool(((design @ fitted - u).abs() <= 1e-9 * (1.0 + u.abs())).all()):
        return False
    c = float(fitted[0])
    a = float(fitted[1]) / c
    near = 0.5 < c / _GELU_C < 2.0 and 0.05 < a / _GELU_A < 20.0
    exact = math.isclose(c, _GELU_C, rel_tol=1e-12) and math.isclose(a, _GELU_A, rel_tol=1e-12)
    return near and not exact


_gelu = functools.partial(_answer, "gelu")
_C = "(2.0 / torch.pi) ** 0.5"
GELU = (
    Mistake("erf", "erf GELU, the slot is the tanh approximation",
            (lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),)),
    Mistake("sigmoid", "x sigmoid(1.702 x) is another approximation; the slot is the tanh one",
            (lambda x: x * torch.sigmoid(1.702 * x),)),
    Mistake("no_cubic", "the cubic term 0.044715 x^3 inside the tanh is missing", (_gelu((" + 0.044715 * x**3", "")),)),
    Mistake("sqrt_2pi", "the constant is sqrt(2/pi), not sqrt(2 pi)", (_gelu((_C, "(2.0 * torch.pi) ** 0.5")),)),
    Mistake("no_half", "the factor 0.5 is missing", (_gelu(("0.5 * x *", "x *")),)),
    Mistake("tanh_by_exp", "tanh written with exp overflows on large inputs (inf / inf): use torch.tanh",
            (_gelu_tanh_by_exp, _gelu_tanh_by_exp_pair), matches=_overflows),
    Mistake("constant_mistyped", "a constant is mistyped or rounded: sqrt(2/pi) = 0.7978845608028654 (write "
            "math.sqrt(2 / math.pi)) and 0.044715 exactly",
            (_gelu((_C, "0.7978")), _gelu(("0.044715", "0.04715")), _gelu((_C, "0.79788456"))),
            matches=_gelu_constant_mistyped),
)  # fmt: skip


_cross_entropy = functools.partial(_answer, "cross_entropy")
_SCORED_ROWS = "logits, targets = logits[scored], targets[scored]"
_PICKED = "logits.gather(-1, targets[:, None])"
CROSS_ENTROPY = (
    Mistake("ignored_scored", "targets equal to -100 were scored: leave those rows out of the loss and the mean",
            (_cross_entropy((_SCORED_ROWS, "pass"), (_PICKED, "logits.gather(-1, targets[:, None].clamp(min=0))"
                                                              " * (targets[:, None] != -100)")),)),
    Mistake("mean_over_all", "the mean is over all N rows; divide by the number of scored targets (not -100)",
            (_cross_entropy((".mean()", ".sum() / len(scored)")),)),
    Mistake("summed", "the loss is summed; it is the mean over the scored targets",
            (_cross_entropy((".mean()", ".sum()")),)),
    Mistake("sign", "the sign is flipped: the loss is minus the log-probability of the target",
            (_cross_entropy(("return (", "return -(")),)),
    Mistake("ignored_clamped", "targets of -100 were clamped to class 0 and scored: leave those rows out of the "
            "loss and out of the count", (_cross_entropy((_SCORED_ROWS, "targets = targets.clamp(min=0)")),
                                          _cross_entropy((_SCORED_ROWS, "targets = targets.clamp(min=0)"),
                                                         (".mean()", ".sum() / scored.sum()")))),
    Mistake("global_max", "the max is taken over all the logits, not each row: a row far below it underflows, "
            "sum(exp(logits - m)) is 0 and its log is -inf",
            (_cross_entropy(("logits.amax(dim=-1, keepdim=True)", "logits.amax()")),)),
    Mistake("no_max_shift", "no max shift: log(sum(exp(logits))) overflows on large logits (exp(1000) is inf); "
            "subtract each row's max m first: m + log(sum(exp(logits - m)))",
            (_cross_entropy(("m = logits.amax(dim=-1, keepdim=True)", "m = 0.0")),
             _cross_entropy((f"(logsumexp - {_PICKED}).mean()",
                             f"-({_PICKED}.exp() / logits.exp().sum(dim=-1, keepdim=True)).log().mean()"))),
            matches=_overflows),
)  # fmt: skip


LAYER_NORM_BACKWARD = (
    Mistake("misses_mean", "the backward misses the term -mean(g): the gradient through the mean (g = dy * weight)",
            (_answer("layer_norm_backward", ("g - g.mean(dim=-1, keepdim=True) - xhat", "g - xhat")),),
            backward=True),
    Mistake("misses_variance", "the backward misses the term -xhat * mean(g * xhat): the gradient through the "
            "variance", (_answer("layer_norm_backward", (" - xhat * (g * xhat).mean(dim=-1, keepdim=True)", "")),),
            backward=True),
    Mistake("g_without_weight", "the backward uses dy where it needs g = dy * weight",
            (_answer("layer_norm_backward", ("g = dy * weight", "g = dy")),), backward=True),
    Mistake("dweight_without_xhat", "the gradient of weight is sum(dy * xhat) over the rows, not sum(dy)",
            (_answer("layer_norm_backward", ("dweight = (dy * xhat).reshape", "dweight = dy.reshape")),),
            backward=True),
)  # fmt: skip

ATTENTION_BACKWARD = (
    Mistake("misses_rowsum", "the backward misses the term -rowsum(dP * P): the softmax's backward is "
            "dS = P * (dP - rowsum(dP * P))",
            (_answer("attention_backward", ("d_probs - (d_probs * probs).sum(dim=-1, keepdim=True)", "d_probs")),),
            backward=True),
    Mistake("misses_scale", "the backward forgets the 1/sqrt(d) scale in dq and dk",
            (_answer("attention_backward", ("d_q = d_scores @ k * ctx.scale", "d_q = d_scores @ k"),
                     ("@ q * ctx.scale", "@ q")),), backward=True),
    Mistake("dk_not_transposed", "dK = dS Q is missing the transpose: dK = dS^T Q s, (Tk, Tq) @ (Tq, d), one row "
            "per key", (_answer("attention_backward", ("d_scores.transpose(-2, -1) @ q", "d_scores @ q")),),
            backward=True),
    Mistake("dv_not_transposed", "dV = P dO is missing the transpose: dV = P^T dO, (Tk, Tq) @ (Tq, d), one row "
            "per key", (_answer("attention_backward", ("probs.transpose(-2, -1) @ d_out", "probs @ d_out")),),
            backward=True),
)  # fmt: skip

FLASH_ATTENTION = (
    Mistake("sum_not_rescaled", "the running sum is not rescaled by exp(m_old - m_new) when the max grows",
            (_tiled(("running_sum * rescale", "running_sum")),), tiled=True),
    Mistake("output_not_rescaled", "the output accumulator is not rescaled by exp(m_old - m_new) when the max grows",
            (_tiled(("acc * rescale", "acc")),), tiled=True),
)  # fmt: skip

_SPLIT = "self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)"
_HEADS_BY_VIEW = "(part.{}(B, self.n_head, T, C // self.n_head) for part in self.qkv(x).split(C, dim=-1))"
MULTI_HEAD_ATTENTION = (
    Mistake("heads_strided", "heads split along the wrong axis: head h owns the d features h*d .. (h+1)*d - 1 of "
            "each of q, k, v: view(B, T, 3, n_head, d), not (B, T, 3, d, n_head)",
            (_answer("multi_head_attention", (_SPLIT, "self.qkv(x).view(B, T, 3, C // self.n_head, self.n_head)"
                                                      ".permute(2, 0, 4, 1, 3)")),)),
    Mistake("qkv_interleaved", "the fused projection is [q | k | v], C features each, not [q k v] per head: "
            "view(B, T, 3, n_head, d), not (B, T, n_head, 3, d)",
            (_answer("multi_head_attention", (_SPLIT, "self.qkv(x).view(B, T, self.n_head, 3, C // self.n_head)"
                                                      ".permute(3, 0, 2, 1, 4)")),)),
    Mistake("view_not_transpose", "a view where a transpose is needed: (B, T, C) -> view(B, T, n_head, d) -> "
            "transpose(1, 2) is (B, n_head, T, d); view(B, n_head, T, d) mixes positions and heads",
            (_answer("multi_head_attention", (_SPLIT, _HEADS_BY_VIEW.format("reshape"))),
             _answer("multi_head_attention", (_SPLIT, _HEADS_BY_VIEW.format("view"))))),
    Mistake("merge_not_transposed", "the merge reads (B, n_head, T, d) straight as (B, T, C), mixing heads and "
            "positions: y.transpose(1, 2) first, then reshape(B, T, C)",
            (_answer("multi_head_attention", ("y.transpose(1, 2).reshape", "y.reshape")),)),
    Mistake("merge_not_contiguous", "the merge calls .view on y.transpose(1, 2), which is not contiguous: use "
            ".reshape(B, T, C) (or .contiguous().view(B, T, C))",
            (_answer("multi_head_attention", ("transpose(1, 2).reshape", "transpose(1, 2).view")),)),
    Mistake("not_causal", "attention is called with causal=False: every position sees the future",
            (_answer("multi_head_attention", ("self.attention(q, k, v, True)", "self.attention(q, k, v, False)")),)),
    Mistake("no_projection", "the output projection proj is never applied to the merged heads",
            (_answer("multi_head_attention", ("return self.proj(y.transpose(1, 2).reshape(B, T, C))",
                                              "return y.transpose(1, 2).reshape(B, T, C)")),)),
)  # fmt: skip

_PRE_NORM = "x = x + self.attn(self.ln1(x))\n        return x + self.mlp(self.ln2(x))"
BLOCK = (
    Mistake("post_norm", "post-norm: the norm is applied after the residual add; GPT-2 is pre-norm, "
            "x + attn(ln1(x)), then x + mlp(ln2(x))",
            (_answer("block", (_PRE_NORM, "x = self.ln1(x + self.attn(x))\n        return self.ln2(x + self.mlp(x))")),
             )),
    Mistake("residual_missing", "a residual is missing: each sub-layer adds to the stream, x = x + attn(ln1(x)) and "
            "x = x + mlp(ln2(x))", (_answer("block", ("x = x + self.attn", "x = self.attn")),
                                    _answer("block", ("return x + self.mlp", "return self.mlp")),
                                    _answer("block", ("x = x + self.attn", "x = self.attn"),
                                            ("return x + self.mlp", "return self.mlp")))),
    Mistake("norm_on_stream", "the norm is applied to the residual stream itself: normalise a copy for the "
            "sub-layer and add to x unnormalised, x = x + attn(ln1(x))",
            (_answer("block", (_PRE_NORM, "x = self.ln1(x)\n        x = x + self.attn(x)\n        x = self.ln2(x)\n"
                                          "        return x + self.mlp(x)")),)),
    Mistake("mlp_without_gelu", "the MLP has no GELU between fc and proj: two linear maps in a row are one",
            (_answer("block", ("self.proj(self.gelu(self.fc(x)))", "self.proj(self.fc(x))")),)),
)  # fmt: skip

MODEL = (
    Mistake("positions_off_by_one", "the positions are off by one: the first token is at position 0, "
            "wpe(torch.arange(T))", (_answer("model", ("torch.arange(T,", "torch.arange(1, T + 1,")),)),
    Mistake("head_untied", "the head is untied: lm_head.weight is a parameter of its own; share the token "
            "embedding, self.lm_head.weight = self.wte.weight",
            (_answer("model", ("self.lm_head.weight = self.wte.weight", "pass")),)),
    Mistake("no_final_norm", "the final norm ln_f is never applied before the head",
            (_answer("model", ("self.lm_head(self.ln_f(x))", "self.lm_head(x)")),)),
    Mistake("positions_on_cpu", made_on_cpu(BY_NAME["model"], Origin("torch.arange")),
            (_answer("model", ("wpe(torch.arange(T, device=idx.device))", "wpe(torch.arange(T))")),),
            matches=_meets_another_device),
)  # fmt: skip


_step = functools.partial(_answer, "training_step")
_DECAYS = 'return param.dim() >= 2 and not name.startswith("wpe.")'
_CLIP = "    if settings.grad_clip > 0:\n        clip_gradients(model, settings.grad_clip)"
_UPDATE = "    adamw(model, state, lr, settings)\n"
_V_HAT = "(v / (1.0 - settings.beta2**t)).sqrt() + 1e-8"
TRAINING_STEP = (
    Mistake("decay_on_vectors", "weight decay is applied to biases and norms: AdamW's decay goes on the weight "
            "matrices alone (param.dim() >= 2), never on a bias or a LayerNorm's weight and bias",
            (_step((_DECAYS, "return True")), _step((_DECAYS, 'return name.endswith("weight")')),
             _step((_DECAYS, 'return not name.startswith("wpe.")')))),
    Mistake("position_table_decayed", "the position table wpe is decayed: gpt-train decays every weight matrix but "
            "wpe (shrinking it erases where each token sits); leave out the names that start with wpe.",
            (_step((_DECAYS, "return param.dim() >= 2")),)),
    Mistake("no_decay", "nothing is decayed: AdamW shrinks each weight matrix (but wpe) by lr * weight_decay of "
            "itself at every step, p -= lr * weight_decay * p", (_step((_DECAYS, "return False")),)),
    Mistake("clip_after_step", "the gradients are clipped after the optimiser step (or not at all), so the step took "
            "them unclipped: clip between backward() and the update",
            (_step((_UPDATE, ""), (_CLIP, _UPDATE + _CLIP)), _step((_CLIP, "")))),
    Mistake("clip_per_parameter", "each gradient is clipped by its own norm: clip by the global norm, the square "
            "root of the sum of every gradient's squared norm, one scale for all",
            (_step(("    total = torch.stack([grad.norm() for grad in grads]).norm()\n", ""),
                   ("    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)\n", ""),
                   ("grad.mul_(scale)", "grad.mul_((max_norm / (grad.norm() + 1e-6)).clamp(max=1.0))")),)),
    Mistake("clip_without_eps", "the clip scale is grad_clip / total: gpt-train's (PyTorch's clip_grad_norm_) is "
            "grad_clip / (total + 1e-6)", (_step(("(total + 1e-6)", "total")),)),
    Mistake("clip_when_off", "grad_clip 0 turns clipping off: clip only when settings.grad_clip > 0 (a scale of "
            "0 / total wipes every gradient)", (_step(("settings.grad_clip > 0", "settings.grad_clip >= 0")),)),
    Mistake("schedule_off_by_one", "the learning-rate schedule is off by one: steps count from 0, the first step's "
            "rate is lr / warmup_steps (not 0), step warmup_steps - 1 ends the warm-up at lr, and the cosine starts "
            "at step warmup_steps, at lr", (_step(("settings.lr * (step + 1)", "settings.lr * step")),
                                            _step(("step < settings.warmup_steps", "step <= settings.warmup_steps")),
                                            _step(("(step - settings.warmup_steps)",
                                                   "(step + 1 - settings.warmup_steps)")))),
    Mistake("no_schedule", "the learning rate is settings.lr at every step: set it from the warm-up and the cosine, "
            "step by step", (_step(("lr = learning_rate(step, settings)", "lr = settings.lr")),)),
    Mistake("decay_not_decoupled", "the weight decay is added to the gradient (Adam with L2), not decoupled: AdamW "
            "shrinks the weight itself, p -= lr * weight_decay * p, and the moments never see it",
            (_step(("param.mul_(1.0 - lr * settings.weight_decay)",
                    "param.grad.add_(param, alpha=settings.weight_decay)")),)),
    Mistake("no_bias_correction", "the moments are not bias-corrected: divide m by 1 - beta1^t and v by "
            "1 - beta2^t, t = 1 at the first step",
            (_step(("(1.0 - settings.beta2**t)", "1.0"), ("(1.0 - settings.beta1**t)", "1.0")),)),
    Mistake("eps_misplaced", "epsilon is not where AdamW puts it: m_hat / (sqrt(v_hat) + 1e-8), outside the square "
            "root and after the bias correction",
            (_step((_V_HAT, "(v / (1.0 - settings.beta2**t) + 1e-8).sqrt()")),
             _step((_V_HAT, "(v.sqrt() + 1e-8) / math.sqrt(1.0 - settings.beta2**t)")))),
    Mistake("grads_not_cleared", "the gradients are never cleared: set param.grad = None (or zero them) before "
            "backward(), or each step adds to the last's", (_step(("        param.grad = None\n", "        pass\n")),)),
)  # fmt: skip

_PROBABILITIES = "torch.multinomial(exp / exp.sum(dim=-1, keepdim=True)"
_TEMPERATURE = "logits = logits / temperature"
GENERATION = (
    Mistake("temperature_after_softmax", "the temperature changes nothing: applied after the softmax (probs / T), it "
            "is undone when the draw normalises the probabilities; divide the logits by T before the softmax",
            (_answer("generation", (_TEMPERATURE, "pass"), (_PROBABILITIES, _PROBABILITIES + " / temperature")),
             _answer("generation", (_TEMPERATURE, "pass")))),
    Mistake("temperature_multiplied", "the logits are multiplied by the temperature: divide them, logits / T, so that "
            "T < 1 sharpens the distribution and T > 1 flattens it",
            (_answer("generation", (_TEMPERATURE, "logits = logits * temperature")),)),
    Mistake("top_k_keeps_k_plus_1", "top-k keeps k + 1 tokens: the k-th best is logits.topk(k).values[:, -1:] (index "
            "k - 1 of the sorted logits), and every logit below it is masked",
            (_answer("generation", ("logits.topk(top_k,", "logits.topk(top_k + 1,")),)),
    Mistake("top_k_keeps_k_minus_1", "top-k keeps k - 1 tokens: mask the logits strictly below the k-th best (<), "
            "not the k-th best itself (<=)", (_answer("generation", ("logits < kth_best", "logits <= kth_best")),)),
    Mistake("top_k_fills_zero", "the logits outside the top k are set to 0, not -inf: exp(0) still gives them "
            "weight", (_answer("generation", ('kth_best, float("-inf")', "kth_best, 0.0")),)),
    Mistake("top_k_over_vocabulary", "a top_k of V (the vocabulary's size) or more keeps every token, as gpt-core's "
            "generate does: mask only when top_k < V (logits.topk(k) raises for k > V)",
            (_answer("generation", ("top_k is not None and top_k < logits.shape[-1]", "top_k is not None")),)),
    Mistake("cache_positions_not_offset", "the cache's positions are not offset: a token fed after n cached "
            "positions sits at position n, wpe(torch.arange(n, n + T)), not at 0",
            (_answer("generation", ("start = cache[0][0].shape[2] if cache else 0", "start = 0")),)),
)  # fmt: skip


OWN: dict[str, tuple[Mistake, ...]] = {
    "softmax": SOFTMAX,
    "attention": ATTENTION,
    "layer_norm": LAYER_NORM,
    "gelu": GELU,
    "cross_entropy": CROSS_ENTROPY,
    "layer_norm_backward": LAYER_NORM_BACKWARD,
    "attention_backward": ATTENTION_BACKWARD,
    "flash_attention": FLASH_ATTENTION,
    "multi_head_attention": MULTI_HEAD_ATTENTION,
    "block": BLOCK,
    "model": MODEL,
    "training_step": TRAINING_STEP,
    "generation": GENERATION,
}

FORWARD_OF = {"layer_norm_backward": "layer_norm", "attention_backward": "attention", "flash_attention": "attention"}

MISTAKES: dict[str, tuple[Mistake, ...]] = {
    step: own + OWN.get(FORWARD_OF.get(step, ""), ()) for step, own in OWN.items()
}
"""Each kernel step's mistakes in the order they are tried: its own first, then those of its slot's forward step."""
