"""GPTConfig validation: every bad field is refused with a message that names it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gpt_core import POSITION_ENCODINGS, GPTConfig

BASE = {"vocab_size": 11, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16}


def _config(**overrides):
    return GPTConfig(**{**BASE, **overrides})


def test_valid_config_has_documented_defaults_and_head_dim():
    c = GPTConfig(vocab_size=11, block_size=8)
    assert (c.n_layer, c.n_head, c.n_embd, c.dropout, c.pos) == (4, 4, 128, 0.0, "learned")
    assert c.bias and c.layernorm and c.residual and c.mlp and c.tie_weights
    assert c.head_dim == 32
    assert POSITION_ENCODINGS == ("learned", "rope", "none")


def test_n_embd_not_divisible_by_n_head_is_refused():
    with pytest.raises(ValueError, match=r"n_embd \(18\) must be divisible by n_head \(4\)"):
        _config(n_embd=18, n_head=4)


def test_odd_head_size_is_refused_with_rope_only():
    with pytest.raises(ValueError, match="RoPE needs an even head size, got n_embd / n_head = 3"):
        _config(n_embd=12, n_head=4, pos="rope")
    assert _config(n_embd=12, n_head=4, pos="learned").head_dim == 3
    assert _config(n_embd=12, n_head=4, pos="none").head_dim == 3


@pytest.mark.parametrize("field", ["vocab_size", "block_size", "n_layer", "n_head", "n_embd"])
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_integers_are_refused(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be a positive integer, got {value}"):
        _config(**{field: value})


@pytest.mark.parametrize("field", ["vocab_size", "n_layer", "n_head"])
def test_bool_passed_as_int_is_refused(field):
    with pytest.raises(ValueError, match=rf"{field} must be a positive integer, got True"):
        _config(**{field: True})


@pytest.mark.parametrize("value", [16.0, "16", None])
def test_non_int_sizes_are_refused(value):
    with pytest.raises(ValueError, match=r"n_embd must be a positive integer"):
        _config(n_embd=value)


@pytest.mark.parametrize("pos", ["alibi", "Learned", ""])
def test_unknown_position_encoding_is_refused(pos):
    with pytest.raises(ValueError, match=rf"pos must be one of learned, rope, none, got {pos!r}"):
        _config(pos=pos)


@pytest.mark.parametrize("dropout", [-0.1, 1.0, 1.5, "0.1", True])
def test_dropout_out_of_range_or_not_a_number_is_refused(dropout):
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        _config(dropout=dropout)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan"), True, "2"])
def test_init_scale_must_be_a_positive_finite_number(scale):
    with pytest.raises(ValueError, match=r"^init_scale must be a positive finite number, got "):
        _config(init_scale=scale)


def test_init_scale_defaults_to_gpt2_init_and_accepts_any_positive_scale():
    assert _config().init_scale == 1.0
    assert _config(init_scale=0.1).init_scale == 0.1 and _config(init_scale=8).init_scale == 8


def test_dropout_in_range_is_accepted():
    assert _config(dropout=0.0).dropout == 0.0
    assert _config(dropout=0.99).dropout == 0.99


def test_from_dict_refuses_unknown_keys_and_names_them():
    with pytest.raises(ValueError, match=r"unknown GPTConfig field\(s\): n_embed, n_heads"):
        GPTConfig.from_dict({**BASE, "n_embed": 16, "n_heads": 2})


def test_from_dict_still_validates_values():
    with pytest.raises(ValueError, match="must be divisible by n_head"):
        GPTConfig.from_dict({**BASE, "n_embd": 15})


def test_to_dict_from_dict_round_trip():
    ablated = {"layernorm": False, "residual": False, "mlp": False}
    c = _config(pos="rope", dropout=0.1, bias=False, tie_weights=False, init_scale=3.0, **ablated)
    d = c.to_dict()
    assert d["pos"] == "rope" and d["tie_weights"] is False and d["mlp"] is False
    assert GPTConfig.from_dict(d) == c


def test_config_is_frozen():
    c = _config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.n_layer = 3


def test_check_positions_refuses_only_learned_positions_past_block_size():
    learned = _config()  # block_size 8
    learned.check_positions(8)  # a full block is fine
    with pytest.raises(ValueError, match=r"^the prompt needs 9 positions, longer than block_size 8: learned positions"):
        learned.check_positions(9, "the prompt")
    for pos in ("rope", "none"):
        _config(pos=pos).check_positions(1000)  # no table to run past


@pytest.mark.parametrize("name", ["bias", "layernorm", "residual", "mlp", "tie_weights", "randomized_positions"])
@pytest.mark.parametrize("value", ["no", "False", 0, None])
def test_a_switch_that_is_not_a_bool_is_refused(name, value):
    """The string "False" is true: GPTConfig(bias="no") built a model with biases."""
    with pytest.raises(ValueError, match=rf"^{name} must be True or False, got {re.escape(repr(value))}$"):
        _config(**{name: value})
