"""gpt_core.gpt2: GPT-2's Hugging Face names and config.json, to and from gpt-core's, with no file and no
transformers (the parity against transformers itself is gpt-train's `nox -s gpt2` session)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpt_core import GPT, GPTConfig
from gpt_core.gpt2 import (
    DropoutRatesDiffer,
    config_from_hf,
    hf_config,
    hf_state_dict,
    not_gpt2,
    state_dict_from_hf,
)

SMALL = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8)


def random_model(config: GPTConfig = SMALL) -> GPT:
    """A model whose every parameter is random (biases and norms too), so no mix-up hides behind zeros."""
    model = GPT(config).double()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_()
    return model


def test_round_trip_through_hf_names_is_bit_identical():
    model = random_model()
    tensors = hf_state_dict(model)
    loaded = GPT(config_from_hf(hf_config(model.config))).double()
    weights = state_dict_from_hf(tensors, loaded.config)
    with torch.no_grad():
        for name, param in loaded.named_parameters():
            param.copy_(weights[name])
    for name, param in model.named_parameters():
        assert torch.equal(param, dict(loaded.named_parameters())[name]), name


def test_hf_names_and_conv1d_layout_compute_what_gpt2_computes():
    """Hugging Face's Conv1D is y = x W + b with W (in, out): the exported c_attn and c_fc give our outputs."""
    model = random_model()
    tensors = hf_state_dict(model)
    x = torch.randn(5, SMALL.n_embd, dtype=torch.float64)
    block = model.blocks[1]
    qkv = x @ tensors["transformer.h.1.attn.c_attn.weight"] + tensors["transformer.h.1.attn.c_attn.bias"]
    torch.testing.assert_close(qkv, block.attn.qkv(x), rtol=0, atol=1e-13)  # same products, another order
    assert tensors["transformer.h.1.mlp.c_fc.weight"].shape == (SMALL.n_embd, 4 * SMALL.n_embd)
    assert tensors["transformer.h.1.mlp.c_proj.weight"].shape == (4 * SMALL.n_embd, SMALL.n_embd)
    assert "lm_head.weight" not in tensors  # tied: written once, as the token embedding


def test_openai_layout_without_prefix_and_with_mask_buffers_loads():
    """OpenAI's converted checkpoints name tensors without `transformer.` and hold the causal-mask buffers."""
    model = random_model()
    tensors = {name.removeprefix("transformer."): value for name, value in hf_state_dict(model).items()}
    tensors |= {f"h.{i}.attn.bias": torch.ones(1, 1, 8, 8) for i in range(2)}
    tensors["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    tensors["lm_head.weight"] = tensors["wte.weight"].clone()  # tied: a copy of the embedding, as such files hold
    weights = state_dict_from_hf(tensors, SMALL)
    assert set(weights) == {name for name, _ in model.named_parameters()}
    assert torch.equal(weights["wte.weight"], model.wte.weight)


def test_untied_head_is_its_own_tensor():
    config = dataclasses.replace(SMALL, tie_weights=False)
    model = random_model(config)
    tensors = hf_state_dict(model)
    assert torch.equal(tensors["lm_head.weight"], model.lm_head.weight)
    assert hf_config(config)["tie_word_embeddings"] is False
    assert torch.equal(
        state_dict_from_hf(tensors, config_from_hf(hf_config(config)))["lm_head.weight"], tensors["lm_head.weight"]
    )


def test_config_round_trip_and_gpt2_defaults():
    assert config_from_hf(hf_config(SMALL)) == SMALL
    gpt2 = config_from_hf({"model_type": "gpt2"})  # every other key at transformers' default: the 124M model
    assert (gpt2.vocab_size, gpt2.block_size, gpt2.n_layer, gpt2.n_head, gpt2.n_embd) == (50257, 1024, 12, 12, 768)
    assert gpt2.dropout == 0.1 and gpt2.tie_weights and gpt2.bias and gpt2.pos == "learned"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"model_type": "llama"}, "model_type is 'llama'"),
        ({"activation_function": "gelu"}, "activation_function is 'gelu'"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon is 1e-06"),
        ({"n_inner": 100}, "n_inner is 100"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"scale_attn_weights": False}, "scale_attn_weights"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"attn_pdrop": 0.5}, "one dropout rate"),
        ({"n_embd": 10, "n_head": 3}, "divisible"),
    ],
)
def test_configs_gpt_core_cannot_compute_exactly_are_refused(change, named):
    with pytest.raises(ValueError) as caught:
        config_from_hf(hf_config(SMALL) | change)
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"pos": "rope"}, "pos=rope"),
        ({"pos": "none"}, "pos=none"),
        ({"layernorm": False}, "layernorm=False"),
        ({"residual": False}, "residual=False"),
        ({"bias": False}, "bias=False"),
        ({"mlp": False}, "mlp=False"),
        ({"max_positions": 16, "randomized_positions": True}, "randomized_positions=True"),
    ],
)
def test_architectures_gpt2_cannot_express_are_refused(change, named):
    config = dataclasses.replace(SMALL, **change)
    assert named in not_gpt2(config)
    with pytest.raises(ValueError, match=named):
        hf_config(config)
    with pytest.raises(ValueError, match=named):
        hf_state_dict(GPT(config))


def test_tensors_that_do_not_fit_are_named():
    tensors = hf_state_dict(random_model())
    wrong_shape = tensors | {"transformer.h.0.attn.c_attn.weight": torch.zeros(24, 8)}
    with pytest.raises(ValueError, match=r"'transformer.h.0.attn.c_attn.weight' has shape \(24, 8\).*\(8, 24\)"):
        state_dict_from_hf(wrong_shape, SMALL)
    missing = {k: v for k, v in tensors.items() if k != "transformer.ln_f.bias"}
    with pytest.raises(ValueError, match="missing, e.g. 'transformer.ln_f.bias'"):
        state_dict_from_hf(missing, SMALL)
    with pytest.raises(ValueError, match="'transformer.h.2.ln_1.weight' does not belong to a model of 2 layers"):
        state_dict_from_hf(tensors | {"transformer.h.2.ln_1.weight": torch.ones(8)}, SMALL)
    with pytest.raises(ValueError, match="'score.weight' is not part of a GPT-2 language model"):
        state_dict_from_hf(tensors | {"score.weight": torch.ones(2, 8)}, SMALL)


def test_config_keys_under_transformers_other_names_are_honoured():
    """GPT2Config's attribute_map: num_attention_heads is n_head, and so on; a config.json may use either name."""
    aliased = {key: value for key, value in hf_config(SMALL).items() if key not in ("n_head", "n_embd", "n_layer")}
    aliased.pop("n_positions")
    aliased |= {"num_attention_heads": 2, "hidden_size": 8, "num_hidden_layers": 2, "max_position_embeddings": 8}
    assert config_from_hf(aliased) == SMALL
    heads = config_from_hf({"model_type": "gpt2", "num_attention_heads": 4})
    assert heads.n_head == 4  # not GPT-2's default of 12
    assert config_from_hf(hf_config(SMALL) | {"num_attention_heads": 2}) == SMALL  # both names, one value


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("num_attention_heads", "n_head"),
        ("hidden_size", "n_embd"),
        ("num_hidden_layers", "n_layer"),
        ("max_position_embeddings", "n_positions"),
    ],
)
def test_a_setting_given_under_both_names_with_different_values_is_refused(alias, name):
    config = hf_config(SMALL)
    with pytest.raises(ValueError, match=f"{name} is {config[name]} but {alias}, its other name, is 4; give one"):
        config_from_hf(config | {alias: 4})


def test_a_tensor_stored_with_and_without_the_prefix_is_refused_naming_both():
    tensors = hf_state_dict(random_model())
    twice = tensors | {"wte.weight": torch.zeros(11, 8)}
    with pytest.raises(ValueError, match="tensors 'transformer.wte.weight' and 'wte.weight' are one GPT-2 tensor"):
        state_dict_from_hf(twice, SMALL)
    same = tensors | {"h.0.ln_1.bias": tensors["transformer.h.0.ln_1.bias"].clone()}  # even with equal values
    with pytest.raises(ValueError, match="'transformer.h.0.ln_1.bias' and 'h.0.ln_1.bias' are one GPT-2 tensor"):
        state_dict_from_hf(same, SMALL)


def test_a_tied_head_of_another_shape_than_the_embedding_is_refused():
    tensors = hf_state_dict(random_model()) | {"lm_head.weight": torch.zeros(3, 3)}
    with pytest.raises(ValueError, match=r"'lm_head.weight' has shape \(3, 3\); config.json's model needs \(11, 8\)"):
        state_dict_from_hf(tensors, SMALL)
    meta = {name: torch.empty(value.shape, device="meta") for name, value in tensors.items()}  # a header's shapes
    with pytest.raises(ValueError, match="'lm_head.weight' has shape"):
        state_dict_from_hf(meta, SMALL)


def test_a_tied_head_whose_values_differ_from_the_embedding_is_refused():
    """A tied model's head is its embedding: a file whose head differs is an untied model under a tied config."""
    tensors = hf_state_dict(random_model())
    head = tensors["transformer.wte.weight"].clone()
    head[3, 4] += 1
    with pytest.raises(ValueError, match="ties the head .* 'lm_head.weight' differs from 'transformer.wte.weight'"):
        state_dict_from_hf(tensors | {"lm_head.weight": head}, SMALL)
    same = tensors | {"transformer.wte.weight": tensors["transformer.wte.weight"].float()}
    same["lm_head.weight"] = same["transformer.wte.weight"].double()  # the embedding's values, in another dtype
    weights = state_dict_from_hf(same, SMALL)
    assert "lm_head.weight" not in weights and weights["wte.weight"] is same["transformer.wte.weight"]


def test_dropout_rates_that_differ_are_refused_unless_the_caller_sets_its_own():
    """Inference has no dropout, and a run that sets its own rate needs none of config.json's three."""
    differing = hf_config(dataclasses.replace(SMALL, dropout=0.1)) | {"attn_pdrop": 0.0}
    with pytest.raises(DropoutRatesDiffer, match="resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.0"):
        config_from_hf(differing)
    assert config_from_hf(differing, own_dropout=True) == SMALL  # dropout 0.0
    agreeing = hf_config(dataclasses.replace(SMALL, dropout=0.1))
    assert config_from_hf(agreeing, own_dropout=True).dropout == 0.1  # the file's one rate, where it has one
