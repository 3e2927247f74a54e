"""bf16 inputs: the kernels of both sets keep their statistics in float32 and hand results back in the input's dtype;
a GPT under autocast runs its products in bf16 and keeps the residual stream, the loss and the gradients
in float32. References are PyTorch's built-ins in float64 on the same (bf16) values.

bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-8 of itself (ROUNDING).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpt_core import (
    GPT,
    GPTConfig,
    attention,
    attention_weights,
    cross_entropy,
    layer_norm,
    log_softmax,
    reference,
    softmax,
)
from gpt_core.reference import upcast

ROUNDING = 2.0**-8


def bf16(gen: torch.Generator, *shape: int, offset: float = 0.0, grad: bool = True) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) + offset).bfloat16().requires_grad_(grad)


def widened(x: torch.Tensor) -> torch.Tensor:
    """The same values in float64, a leaf of its own."""
    return x.detach().double().requires_grad_(x.requires_grad)


def largest_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |ours - reference| over max |reference|, in float64."""
    return ((ours.double() - reference).abs().max() / reference.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_upcast_widens_16_bit_floats(dtype):
    assert upcast(torch.ones(3, dtype=dtype)).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_upcast_hands_wider_floats_back_uncopied_so_their_path_is_unchanged(dtype):
    x = torch.ones(3, dtype=dtype)
    assert upcast(x) is x


BOTH_SETS = {"ids": ["fast", "reference"]}


@pytest.mark.parametrize("layer_norm", [layer_norm, reference.layer_norm], **BOTH_SETS)
def test_layer_norm_of_bf16_rows_far_from_zero_keeps_its_statistics_in_float32(gen, layer_norm):
    """Rows near 100 with spread 1: a mean rounded to bf16 (spacing 0.5 there) is off by up to 0.25, a
    quarter of the spread, and the output with it; in float32 only the output's own rounding is left."""
    x, weight, bias = bf16(gen, 64, 32, offset=100.0), torch.randn(32, generator=gen), torch.randn(32, generator=gen)
    weight.requires_grad_()
    bias.requires_grad_()
    ours = layer_norm(x, weight, bias)
    wide = [widened(t) for t in (x, weight, bias)]
    reference = F.layer_norm(wide[0], (32,), wide[1], wide[2])
    assert ours.dtype == torch.bfloat16
    assert largest_error(ours, reference) <= ROUNDING
    centred = x - x.mean(dim=-1, keepdim=True)  # the same arithmetic in bf16
    in_bf16 = centred * centred.square().mean(dim=-1, keepdim=True).add(1e-5).rsqrt() * weight + bias
    assert largest_error(in_bf16.detach(), reference) > 10 * ROUNDING

    cotangent = torch.randn(64, 32, generator=gen).bfloat16()  # exactly the same values in float64 below
    grads = torch.autograd.grad(ours, (x, weight, bias), cotangent)
    expected = torch.autograd.grad(reference, wide, cotangent.double())
    assert [g.dtype for g in grads] == [torch.bfloat16, torch.float32, torch.float32]
    assert largest_error(grads[0], expected[0]) <= ROUNDING
    assert max(largest_error(g, e) for g, e in zip(grads[1:], expected[1:], strict=True)) <= 1e-5


@pytest.mark.parametrize("cross_entropy", [cross_entropy, reference.cross_entropy], **BOTH_SETS)
def test_cross_entropy_of_bf16_logits_keeps_the_log_sum_exp_and_the_loss_in_float32(gen, cross_entropy):
    """Logits near 40: a log-sum-exp rounded to bf16 (spacing 0.25 there) moves a row's loss by up to
    0.125; computed in float32 each row's loss is right to float32's precision."""
    logits = bf16(gen, 64, 11, offset=40.0)
    targets = torch.randint(11, (64,), generator=gen)
    targets[::5] = -100
    ours = cross_entropy(logits, targets)
    wide_logits = widened(logits)
    reference = F.cross_entropy(wide_logits, targets)
    assert ours.dtype == torch.float32
    assert abs(ours.item() - reference.item()) <= 1e-6 * reference.item()
    rows = [i for i in range(64) if targets[i] != -100]
    per_row = torch.stack([cross_entropy(logits[i : i + 1], targets[i : i + 1]) for i in rows]).double()
    per_row_reference = F.cross_entropy(wide_logits[rows], targets[rows], reduction="none")
    lse_in_bf16 = logits.detach().float().logsumexp(dim=-1).bfloat16().double()[rows]
    picked = wide_logits.detach()[rows, targets[rows]]
    assert (per_row - per_row_reference).abs().max().item() <= 1e-5
    assert (lse_in_bf16 - picked - per_row_reference).abs().max().item() > 0.05

    (grad,) = torch.autograd.grad(ours, logits)
    (expected,) = torch.autograd.grad(reference, wide_logits)
    assert grad.dtype == torch.bfloat16
    assert largest_error(grad, expected) <= ROUNDING


@pytest.mark.parametrize(
    ("function", "builtin"),
    [(softmax, torch.softmax), (reference.softmax, torch.softmax), (log_softmax, torch.log_softmax)],
    ids=["softmax", "reference softmax", "log_softmax"],
)
def test_softmax_and_log_softmax_of_bf16_are_bf16_within_one_rounding(gen, function, builtin):
    x = bf16(gen, 16, 50, offset=30.0)
    ours = function(x)
    assert ours.dtype == torch.bfloat16
    assert largest_error(ours, builtin(widened(x), dim=-1)) <= ROUNDING


@pytest.mark.parametrize(
    ("attention", "attention_weights"),
    [(attention, attention_weights), (reference.attention, reference.attention_weights)],
    **BOTH_SETS,
)
def test_attention_on_bf16_gives_bf16_weights_that_sum_to_one_and_bf16_gradients(gen, attention, attention_weights):
    q, k, v = (bf16(gen, 2, 3, 64, 8) for _ in range(3))
    out, weights = attention(q * 4, k, v, causal=True), attention_weights(q * 4, k, causal=True)  # scores up to ~30
    assert out.dtype == weights.dtype == torch.bfloat16
    assert (weights.double().sum(dim=-1) - 1).abs().max().item() <= 2 * ROUNDING
    grads = torch.autograd.grad(out, (q, k, v), torch.randn(out.shape, generator=gen).bfloat16())
    assert all(g.dtype == torch.bfloat16 and torch.isfinite(g).all() for g in grads)


def test_a_gpt_under_bf16_autocast_multiplies_in_bf16_and_keeps_the_rest_float32(gen):
    """What autocast does to gpt-core's model: Linear (addmm) runs in bf16; the residual stream stays
    float32 (the embeddings are float32 and adding a bf16 branch promotes), so LayerNorm sees float32;
    the loss is float32 and every gradient lands in the float32 weights."""
    model = GPT(GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=32))
    idx, targets = torch.randint(11, (4, 16), generator=gen), torch.randint(11, (4, 16), generator=gen)
    seen = {}

    def record(name: str):
        def hook(module, args, out) -> None:  # returns None: the output is left as it is
            seen[name] = (out[0] if isinstance(out, tuple) else out).dtype

        return hook

    for name in ("blocks.0.ln1", "blocks.0.attn.qkv", "blocks.0.mlp.fc", "blocks.0", "lm_head"):
        model.get_submodule(name).register_forward_hook(record(name))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(idx, targets)
    assert seen == {
        "blocks.0.ln1": torch.float32,
        "blocks.0.attn.qkv": torch.bfloat16,
        "blocks.0.mlp.fc": torch.bfloat16,
        "blocks.0": torch.float32,
        "lm_head": torch.bfloat16,
    }
    assert mixed.loss.dtype == torch.float32
    mixed.loss.backward()
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in model.parameters())
    assert abs(mixed.loss.item() - model(idx, targets).loss.item()) <= 1e-2
