"""`read`: the last block asks from the first position read on, its MLP and the head run only at the
positions read, and what they give there is what computing every position and discarding the rest gives:
the logits, the loss and every gradient, in float64 to 1e-12."""

from __future__ import annotations

import pytest
import torch

from gpt_core import GPT, IGNORE_INDEX, KERNEL_SETS, REFERENCE_KERNELS, GPTConfig, Kernels

SHAPES = {
    "two layers, learned positions": {"n_layer": 2},
    "one layer, no LayerNorm, untied": {"n_layer": 1, "layernorm": False, "tie_weights": False, "init_scale": 8.0},
    "rope, no residual": {"n_layer": 2, "pos": "rope", "residual": False},
    "attention-only": {"n_layer": 2, "mlp": False},
}


def _model(shape: dict, kernels) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=9, n_head=2, n_embd=16, **shape)
    return (GPT(config) if kernels is None else GPT(config, kernels)).double()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.Generator().manual_seed(1)
    idx = torch.randint(11, (4, 9), generator=data)
    targets = torch.randint(11, (4, 9), generator=data)
    targets[:, :5] = IGNORE_INDEX  # a prompt ...
    targets[2, 6] = IGNORE_INDEX  # ... and rows that score different positions
    targets[3, :] = IGNORE_INDEX
    return idx, targets


def _logits_loss_grads(model: GPT, idx, targets, read) -> tuple[torch.Tensor, torch.Tensor, dict]:
    model.zero_grad()
    out = model(idx, targets, read=read)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("kernels", [None, REFERENCE_KERNELS], ids=["fast", "reference"])
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_reading_the_scored_positions_alone_equals_computing_all_and_discarding(shape, kernels):
    model = _model(shape, kernels)
    idx, targets = _batch()
    read = targets != IGNORE_INDEX
    full_logits, full_loss, full_grads = _logits_loss_grads(model, idx, targets, None)
    logits, loss, grads = _logits_loss_grads(model, idx, targets, read)
    assert logits.shape == (int(read.sum()), 11)
    assert torch.allclose(logits, full_logits[read], rtol=0, atol=1e-12)
    assert abs(float(loss - full_loss)) <= 1e-12
    assert grads.keys() == full_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, full_grads[name], rtol=0, atol=1e-12), name


def test_without_targets_read_gives_the_logits_at_the_positions_asked_for():
    model = _model(SHAPES["two layers, learned positions"], None).eval()
    idx, _ = _batch()
    last = torch.zeros(idx.shape, dtype=torch.bool)
    last[:, -1] = True
    with torch.no_grad():
        out = model(idx, read=last)
        assert out.loss is None
        assert torch.allclose(out.logits, model(idx).logits[:, -1], rtol=0, atol=1e-12)


FROM_THE_LAST_MLP_ON = (
    *(f"blocks.1.{point}" for point in ("ln2", "mlp_hidden", "mlp_out", "resid_post")),
    "ln_final",
    "logits",
)


def test_hooks_from_the_last_mlp_on_hold_the_read_rows_and_those_before_every_position():
    model = _model(SHAPES["two layers, learned positions"], None).eval()
    idx, targets = _batch()
    read = targets != IGNORE_INDEX
    n = int(read.sum())
    with torch.no_grad():
        _, every = model.run_with_cache(idx)
        _, cached = model.run_with_cache(idx, read=read)
    assert cached.keys() == every.keys()
    for name, activation in cached.items():
        expected = every[name][read] if name in FROM_THE_LAST_MLP_ON else every[name]
        assert activation.shape == expected.shape, name
        assert torch.allclose(activation, expected, rtol=0, atol=1e-12), name
    assert cached["logits"].shape == (n, 11)


def test_reading_every_position_gives_the_full_logits_bit_for_bit():
    model = _model(SHAPES["two layers, learned positions"], None).float()
    idx, targets = _batch()
    targets[:] = 1
    every = torch.ones(idx.shape, dtype=torch.bool)
    full = model(idx, targets)
    read = model(idx, targets, read=every)
    assert torch.equal(read.logits, full.logits.reshape(-1, 11)) and torch.equal(read.loss, full.loss)


def test_the_last_block_asks_only_from_the_first_position_read_and_earlier_blocks_everywhere():
    asked = []

    def attention(q, k, v, causal=True):
        asked.append((q.shape[-2], k.shape[-2]))
        return REFERENCE_KERNELS.attention(q, k, v, causal)

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=9, n_layer=2, n_head=2, n_embd=16)
    model = GPT(config, Kernels(attention=attention)).double()
    idx, targets = _batch()  # the first position scored is 5
    model(idx, targets, read=targets != IGNORE_INDEX)
    assert asked == [(9, 9), (4, 9)]
    asked.clear()
    with model.hooks({"blocks.1.z": lambda z, name: None}):  # a hook sees every position, as documented
        model(idx, targets, read=targets != IGNORE_INDEX)
    assert asked == [(9, 9), (9, 9)]


@pytest.mark.parametrize(
    "read",
    [torch.ones(2, 2, dtype=torch.bool), torch.ones(1, 9, dtype=torch.bool), torch.ones(4, 9)],
    ids=["fewer positions", "fewer rows", "floats"],
)
def test_a_read_mask_not_of_idxs_shape_or_not_bool_is_refused(read):
    """Flattened, a (2, 2) mask on (4, 9) ids read the first row's positions 1 and 2 in silence."""
    idx, _ = _batch()
    with pytest.raises(ValueError, match=r"^read must be a bool mask of idx's shape \(4, 9\)"):
        _model(SHAPES["two layers, learned positions"], None)(idx, read=read)


def test_a_read_mask_on_another_device_than_idx_and_the_host_is_refused():
    idx, targets = _batch()
    with pytest.raises(ValueError, match=r"on its device or the CPU, got torch.bool \(4, 9\) on meta$"):
        _model(SHAPES["two layers, learned positions"], None)(idx, read=(targets != IGNORE_INDEX).to("meta"))


def test_a_read_mask_on_the_host_trains_a_model_whose_values_the_host_never_reads():
    """On a GPU, every read of a device value (`.item()`, `nonzero`, a bool) stalls the host until the GPU's queue
    empties. A model on the meta device, whose tensors hold no values, stands for it: its forward and backward with
    `read` on the host run through, and with `read` on the model's device they stop at the first such read."""
    idx, targets = _batch()
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=11, block_size=9, n_head=2, n_embd=16, n_layer=2), KERNEL_SETS["fast"])
    read = targets != IGNORE_INDEX
    out = model(idx.to("meta"), targets.to("meta"), read=read)
    out.loss.backward()
    assert out.logits.shape == (int(read.sum()), 11) and out.loss.device.type == "meta"
    with pytest.raises(RuntimeError, match="meta"):
        model(idx.to("meta"), targets.to("meta"), read=read.to("meta"))
