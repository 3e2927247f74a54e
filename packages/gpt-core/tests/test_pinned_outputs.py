"""The default model is the one it was: for the same seed, the same parameters (names, order, values) bit for
bit, the same logits, loss, gradients and cached decoding, and the same generated tokens, against outputs
pinned in tests/data/pinned_outputs.pt (see make_pinned_outputs.py beside it). A checkpoint written by an
earlier version therefore loads, and computes what it did.

What the weights compute is pinned in float64, to 1e-12 of each tensor's largest entry: float32's last bits
depend on the CPU's matmul kernels (the float32 gradients of these models differ by up to 1.6e-6 of their
largest entry between an Intel Xeon and an AMD EPYC), float64's rounding is 2^29 times finer, and a change of
one part in 10^9 is caught (the tolerance's own test below)."""

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


def matches_pin(fresh: torch.Tensor, pin: torch.Tensor) -> bool:
    """Tokens and weights exactly; float64 outputs within 1e-12 of the pinned tensor's largest entry."""
    if fresh.dtype != pin.dtype or fresh.shape != pin.shape:
        return False
    if fresh.dtype != torch.float64:
        return torch.equal(fresh, pin)
    return bool((fresh - pin).abs().max() <= 1e-12 * pin.abs().max())


def test_every_pinned_output_is_computed_again(name):
    fresh = MAKER.pinned(name, MAKER.CONFIGS[name])
    keys = sorted(key[len(name) + 1 :] for key in PINNED if key.startswith(f"{name}."))
    assert sorted(fresh) == keys
    assert {PINNED[f"{name}.logits"].dtype, PINNED[f"{name}.grad.wte.weight"].dtype} == {torch.float64}
    differing = [key for key in keys if not matches_pin(fresh[key], PINNED[f"{name}.{key}"])]
    assert differing == []


def test_the_tolerance_catches_a_change_of_one_part_in_a_billion(name):
    pin = PINNED[f"{name}.logits"]
    assert matches_pin(pin.clone(), pin)
    assert not matches_pin(pin * (1 + 1e-9), pin)


def test_generation_from_a_loaded_checkpoint_is_pinned(name):
    model = GPT(GPTConfig(**MAKER.SHAPE, **MAKER.CONFIGS[name])).eval()
    model.load_state_dict(pins(name, "state."))
    model.double()
    prompt = PINNED[f"{name}.greedy"][:, :3]
    torch.manual_seed(4)
    assert torch.equal(generate(model, prompt, 4, temperature=0.0), PINNED[f"{name}.greedy"])
