"""The default model is the one it was: for the same seed, the same parameters (names, order, values),
the same logits, loss and gradients, the same cached decoding and generated tokens, bit for bit
(`torch.equal`), against outputs pinned in tests/data/pinned_outputs.pt (see make_pinned_outputs.py
beside it). A checkpoint written by an earlier version therefore loads, and computes what it did."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from gpt_core import GPT, GPTConfig, generate

DATA = Path(__file__).parent / "data"
PINNED = torch.load(DATA / "pinned_outputs.pt", weights_only=True)
_spec = importlib.util.spec_from_file_location("make_pinned_outputs", DATA / "make_pinned_outputs.py")
MAKER = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(MAKER)


def pins(name: str, prefix: str) -> dict[str, torch.Tensor]:
    start = f"{name}.{prefix}"
    return {key[len(start) :]: value for key, value in PINNED.items() if key.startswith(start)}


@pytest.fixture(params=list(MAKER.CONFIGS))
def name(request) -> str:
    return request.param


def test_the_pins_are_small():
    assert (DATA / "pinned_outputs.pt").stat().st_size < 200_000


def test_a_seeded_model_has_the_pinned_parameters_in_the_pinned_order(name):
    torch.manual_seed(0)
    state = GPT(GPTConfig(**MAKER.SHAPE, **MAKER.CONFIGS[name])).state_dict()
    pinned = pins(name, "state.")
    assert list(state) == list(pinned)
    assert all(torch.equal(state[key], pinned[key]) for key in pinned)


def test_a_pinned_checkpoint_loads_strictly(name):
    model = GPT(GPTConfig(**MAKER.SHAPE, **MAKER.CONFIGS[name]))
    model.load_state_dict(pins(name, "state."), strict=True)


def test_every_pinned_output_is_computed_again_bit_for_bit(name):
    fresh = MAKER.pinned(name, MAKER.CONFIGS[name])
    keys = sorted(key[len(name) + 1 :] for key in PINNED if key.startswith(f"{name}."))
    assert sorted(fresh) == keys
    differing = [key for key in keys if not torch.equal(fresh[key], PINNED[f"{name}.{key}"])]
    assert differing == []


def test_generation_from_a_loaded_checkpoint_is_pinned(name):
    model = GPT(GPTConfig(**MAKER.SHAPE, **MAKER.CONFIGS[name])).eval()
    model.load_state_dict(pins(name, "state."))
    prompt = PINNED[f"{name}.greedy"][:, :3]
    torch.manual_seed(4)
    assert torch.equal(generate(model, prompt, 4, temperature=0.0), PINNED[f"{name}.greedy"])
