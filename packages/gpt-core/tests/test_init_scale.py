"""init_scale: a multiplier of GPT-2's initial weight matrices (the grokking lever), and 1.0 is today's model."""

from __future__ import annotations

import pytest
import torch

from gpt_core import GPT, GPTConfig

SHAPE = {"vocab_size": 13, "block_size": 6, "n_layer": 2, "n_head": 2, "n_embd": 16}


def _model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**SHAPE, **overrides}))


@pytest.mark.parametrize("tie_weights", [True, False])
def test_default_scale_is_the_unscaled_model_bit_for_bit(monkeypatch, tie_weights):
    """The model as it was before init_scale existed: the same constructor without the scaling step."""
    idx = torch.randint(0, SHAPE["vocab_size"], (3, SHAPE["block_size"]), generator=torch.Generator().manual_seed(1))
    scaled = _model(tie_weights=tie_weights)
    monkeypatch.setattr(GPT, "_scale_initial_weights", lambda self: None)
    unscaled = _model(tie_weights=tie_weights)
    for (name, a), (_, b) in zip(scaled.state_dict().items(), unscaled.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(scaled(idx).logits, unscaled(idx).logits)


def test_default_scale_consumes_the_same_random_draws():
    """Scaling happens after the draws: the RNG state after construction does not depend on the scale."""
    _model(init_scale=1.0)
    after_default = torch.get_rng_state()
    _model(init_scale=5.0)
    assert torch.equal(torch.get_rng_state(), after_default)


@pytest.mark.parametrize("tie_weights", [True, False])
@pytest.mark.parametrize("layernorm", [True, False])
def test_every_weight_matrix_is_scaled_once_and_vectors_are_kept(tie_weights, layernorm):
    base = _model(tie_weights=tie_weights, layernorm=layernorm)
    scaled = _model(tie_weights=tie_weights, layernorm=layernorm, init_scale=4.0)
    matrices = 0
    for (name, a), (_, b) in zip(base.named_parameters(), scaled.named_parameters(), strict=True):
        if a.dim() >= 2:
            matrices += 1
            assert torch.equal(b, a * 4.0), name  # x4 is exact in binary floating point
        else:
            assert torch.equal(b, a), name  # LayerNorm gains stay 1, biases 0
    assert matrices == 2 + 4 * SHAPE["n_layer"] + (0 if tie_weights else 1)  # wte, wpe, 4 per block, head
    if tie_weights:  # shared with wte, so scaled with it, not a second time
        assert scaled.lm_head.weight is scaled.wte.weight
