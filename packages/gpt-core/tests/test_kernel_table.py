"""The kernel table: a model computes with its own kernels, and only that model; gpt-core's own are the
default and change nothing; a swapped-in kernel gives the same model when it computes the same function."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from gpt_core import (
    DEFAULT_KERNELS,
    FAST_KERNELS,
    GPT,
    KERNEL_SETS,
    KERNEL_SIGNATURES,
    KERNEL_SLOTS,
    REFERENCE_KERNELS,
    GPTConfig,
    Kernels,
    attention,
    attention_weights,
    dropout,
    generate,
)
from gpt_core import kernels as F_ours

CONFIG = GPTConfig(vocab_size=11, block_size=12, n_layer=2, n_head=2, n_embd=16, pos="rope")


def counting(kernel, calls: list[str], slot: str):
    """`kernel`, recording each call under `slot`: a new function object, so the model treats it as swapped."""

    def counted(*args):
        calls.append(slot)
        return kernel(*args)

    return counted


def same_function_swapped(calls: list[str]) -> Kernels:
    """Every slot filled by a new object computing gpt-core's own function."""
    return Kernels(
        attention=counting(lambda q, k, v, causal: attention(q, k, v, causal), calls, "attention"),
        attention_weights=counting(attention_weights, calls, "attention_weights"),
        sampling_softmax=counting(F_ours.softmax.softmax, calls, "sampling_softmax"),
        layer_norm=counting(F_ours.layer_norm.layer_norm, calls, "layer_norm"),
        gelu=counting(F_ours.gelu.gelu, calls, "gelu"),
        cross_entropy=counting(F_ours.cross_entropy.cross_entropy, calls, "cross_entropy"),
        dropout=counting(dropout, calls, "dropout"),
    )


def test_slots_and_signatures_name_the_same_fields():
    order = ("attention", "attention_weights", "sampling_softmax", "layer_norm", "gelu", "cross_entropy", "dropout")
    assert tuple(KERNEL_SLOTS) == order
    assert set(KERNEL_SIGNATURES) == set(KERNEL_SLOTS)
    assert DEFAULT_KERNELS.swapped() == []
    assert Kernels(gelu=lambda x: x).swapped() == ["gelu"]


def test_swapped_kernels_compute_the_same_model_and_are_the_ones_called(close):
    calls: list[str] = []
    torch.manual_seed(3)
    ours = GPT(CONFIG).double()
    swapped = GPT(CONFIG, same_function_swapped(calls)).double()
    swapped.load_state_dict(ours.state_dict())
    idx = torch.randint(11, (3, 12))
    a, b = ours(idx, idx), swapped(idx, idx)
    a.loss.backward()
    b.loss.backward()
    close("swapped kernels: logits", b.logits, a.logits, 1e-12)
    for (name, p), q in zip(swapped.named_parameters(), ours.parameters(), strict=True):
        close(f"swapped kernels: grad {name}", p.grad, q.grad, 1e-12)
    # 2 layers: 2 attention, 5 LayerNorms, 2 GELUs, 5 dropouts (the embeddings' and each block's two outputs'), 1
    # loss in the forward; softmax only when sampling, the weights only when a hook reads them.
    assert sorted(set(calls)) == ["attention", "cross_entropy", "dropout", "gelu", "layer_norm"]
    counts = [calls.count(slot) for slot in ("attention", "layer_norm", "gelu", "dropout")]
    assert counts == [2, 5, 2, 5]
    names = [name for name in ours.hook_names() if name.endswith(".pattern")]
    calls.clear()
    with torch.no_grad():
        weights_a, weights_b = ours.run_with_cache(idx, names)[1], swapped.run_with_cache(idx, names)[1]
    assert calls.count("attention_weights") == 2 and "attention" not in calls
    for name in names:
        close("swapped kernels: attention weights", weights_b[name], weights_a[name], 1e-12)


def test_two_models_in_one_process_keep_their_own_kernels():
    calls: list[str] = []
    plain, swapped = GPT(CONFIG), GPT(CONFIG, same_function_swapped(calls))
    idx = torch.randint(11, (2, 5))
    plain(idx, idx)
    assert calls == []
    swapped(idx, idx)
    assert calls
    calls.clear()
    plain(idx, idx)
    assert calls == []


def test_initial_weights_do_not_depend_on_the_kernels():
    torch.manual_seed(7)
    a = GPT(CONFIG).state_dict()
    torch.manual_seed(7)
    b = GPT(CONFIG, same_function_swapped([])).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_swapped_attention_gives_its_output_and_the_hooks_give_the_weights():
    model = GPT(CONFIG, Kernels(attention=lambda q, k, v, causal: attention(q, k, v, causal)))
    assert model.blocks[0].attn(torch.randn(1, 4, 16)).shape == (1, 4, 16)
    assert GPTOutput_fields(model(torch.randint(11, (1, 4)))) == ("logits", "loss")
    _, recorded = model.run_with_cache(torch.randint(11, (1, 4)), ["blocks.0.pattern", "blocks.1.pattern"])
    assert recorded["blocks.1.pattern"].shape == (1, 2, 4, 4)


def GPTOutput_fields(out) -> tuple[str, ...]:
    return type(out)._fields


def test_generate_samples_through_the_models_softmax():
    calls: list[str] = []
    kernels = dataclasses.replace(DEFAULT_KERNELS, sampling_softmax=counting(F_ours.softmax.softmax, calls, "softmax"))
    model = GPT(CONFIG, kernels).eval()
    torch.manual_seed(1)
    plain = GPT(CONFIG).eval()
    plain.load_state_dict(model.state_dict())
    prompt = torch.randint(11, (2, 3))
    tokens = generate(model, prompt, 4, temperature=1.0, generator=torch.Generator().manual_seed(5))
    assert calls == ["softmax"] * 4
    expected = generate(plain, prompt, 4, temperature=1.0, generator=torch.Generator().manual_seed(5))
    assert torch.equal(tokens, expected)


def test_a_swapped_attention_with_dropout_is_refused():
    config = dataclasses.replace(CONFIG, dropout=0.1)
    GPT(config)  # gpt-core's own attention applies the dropout
    with pytest.raises(ValueError, match="dropout 0.1 needs gpt-core's own attention kernel"):
        GPT(config, Kernels(attention=lambda q, k, v, causal: attention(q, k, v, causal)))
    GPT(config, Kernels(gelu=lambda x: F_ours.gelu.gelu(x)))  # another slot swapped: fine
    GPT(config, REFERENCE_KERNELS)  # the reference attention takes dropout_p: fine


def test_the_default_is_the_fast_set_and_every_set_is_named():
    assert DEFAULT_KERNELS is FAST_KERNELS and Kernels() == FAST_KERNELS
    triton = ["triton"] if importlib.util.find_spec("triton") is not None else []  # gpt-core[triton]'s GPU kernels
    assert list(KERNEL_SETS) == ["fast", "reference", *triton]  # named without importing Triton
    assert KERNEL_SETS["fast"] is FAST_KERNELS and KERNEL_SETS["reference"] is REFERENCE_KERNELS
    own = [slot for slot in KERNEL_SLOTS if slot != "dropout"]  # the fast set's dropout is the reference's
    assert REFERENCE_KERNELS.swapped() == own  # every other slot is the reference's own
    from gpt_core import reference

    for slot in ("attention", "attention_weights", "layer_norm", "gelu", "cross_entropy", "dropout"):
        assert getattr(REFERENCE_KERNELS, slot) is getattr(reference, slot), slot
    assert REFERENCE_KERNELS.sampling_softmax is reference.softmax


def test_a_models_kernels_are_fixed_when_it_is_built():
    """Assigned afterwards, a set reached the loss alone: the layers keep the set they were built with."""
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    with pytest.raises(AttributeError, match="chosen when it is built"):
        model.kernels = REFERENCE_KERNELS
    with pytest.raises(TypeError, match="kernels must be a Kernels set"):
        GPT(model.config, "reference")
