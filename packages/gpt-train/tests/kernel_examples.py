"""Kernels the tests name by module path (`--kernel attention=kernel_examples:attention`): one right
attention, and the mistakes verification must catch, each a plausible slip of someone writing their own."""

from __future__ import annotations

from collections import Counter

import torch

from gpt_core.kernels.layer_norm import _LayerNorm
from gpt_core.reference import dropout as reference_dropout
from gpt_train.learn.zoo import OWN

CALLS: Counter[str] = Counter()
"""How often each kernel here has run: a test's proof that a model computed with it."""


def _attention(q, k, v, causal: bool, scale: float, shift: int = 0):
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries + shift)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention(q, k, v, causal):
    """Right: scale 1/sqrt(d), the causal mask aligned to the end of the keys."""
    CALLS["attention"] += 1
    return _attention(q, k, v, causal, q.shape[-1] ** -0.5)


def scale_over_d(q, k, v, causal):
    """Wrong: the scores scaled by 1/d instead of 1/sqrt(d)."""
    return _attention(q, k, v, causal, 1.0 / q.shape[-1])


def mask_shifted_by_one(q, k, v, causal):
    """Wrong: the causal mask shifted by one, so each query also sees the next key."""
    return _attention(q, k, v, causal, q.shape[-1] ** -0.5, shift=1)


def attention_wrong_in_16_bits(q, k, v, causal):
    """Wrong where a bf16 or fp16 run computes: a 16-bit path of its own, its output scaled by 1.5."""
    out = attention(q, k, v, causal)
    return out * 1.5 if q.dtype in (torch.bfloat16, torch.float16) else out


def unbiased_layer_norm(x, weight, bias, eps):
    """Wrong: the unbiased variance (over C - 1), where LayerNorm divides by C."""
    centred = x - x.mean(dim=-1, keepdim=True)
    y = centred / (centred.square().sum(dim=-1, keepdim=True) / (x.shape[-1] - 1) + eps).sqrt() * weight
    return y if bias is None else y + bias


layer_norm_backward_drops_a_term = next(m for m in OWN["layer_norm_backward"] if m.key == "misses_variance").kernels[0]
"""Wrong: LayerNorm whose backward drops the - xhat * mean(g * xhat) term of dx (the course's classic mistake)."""


class _LayerNormDifferentiatedTwice(_LayerNorm):
    backward = staticmethod(_LayerNorm.backward.__wrapped__)  # gpt-core's backward without `differentiates_once`


def layer_norm_wrong_second_derivative(x, weight, bias, eps):
    """Right forward and backward, a wrong second derivative: gpt-core's own LayerNorm unmarked, so under
    create_graph=True its backward records a graph missing every term through xhat and 1/std, saved without one."""
    return _LayerNormDifferentiatedTwice.apply(x, weight, bias, eps)


def gelu_right_in_float64_only(x):
    """Wrong where a model computes: a float64 path of its own (as a GPU kernel's fallback may be) is the tanh
    GELU, the float32 one ReLU."""
    if x.dtype == torch.float64:
        return 0.5 * x * (1.0 + torch.tanh((2.0 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))
    return torch.relu(x)


def hotter_sampling_softmax(x):
    """Wrong: sampling at temperature 2 whatever is asked (the softmax of x / 2)."""
    return torch.softmax(x / 2, dim=-1)


not_a_function = 42


def layer_norm_wrong_when_compiled(x, weight, bias, eps):
    """Right eagerly, wrong under torch.compile, as a compiler's bug is: the same output, but a gradient with
    respect to x that is off by the incoming gradient itself. Verification, which runs eagerly, passes it."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps) * weight
    y = y if bias is None else y + bias
    if torch.compiler.is_compiling():
        y = y + (x - x.detach())  # adds 0 to the output, and the identity to its gradient
    return y


def dropout_wrong_when_compiled(x, p, training):
    """Right eagerly, wrong under torch.compile and only in training, as a compiler's bug in its random draws would
    be: the same output, a gradient off by the incoming gradient. A model that draws has its compiled first step
    checked in eval mode, which cannot see it."""
    y = reference_dropout(x, p, training)
    return y + (x - x.detach()) if training and torch.compiler.is_compiling() else y
