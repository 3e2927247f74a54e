"""The reference kernels, each piece as its definition in plain autograd: pinned to PyTorch in float64,
forward and backward; agreeing with the fast set on every verification case; and a model that trains."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from gpt_core import FAST_KERNELS, GPT, IGNORE_INDEX, REFERENCE_KERNELS, GPTConfig, log_softmax, reference
from gpt_core.kernels.linear import embedding, linear
from gpt_core.testing import format_report, verification_report

TOL = 1e-12


FAST = {
    "linear": linear,
    "embedding": embedding,
    "layer_norm": lambda x, weight, bias: FAST_KERNELS.layer_norm(x, weight, bias, 1e-5),
    "gelu": FAST_KERNELS.gelu,
    "softmax": FAST_KERNELS.sampling_softmax,
    "log_softmax": log_softmax,
    "cross_entropy": FAST_KERNELS.cross_entropy,
    "sdpa": FAST_KERNELS.attention,  # the harness hands it square causal blocks only, where both alignments agree
}
"""The fast set, as the references a verification report compares with."""


def _failures(rows) -> list[str]:
    return [failure for row in rows if (failure := row.failure(TOL)) is not None]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_reference_set_matches_pytorch_in_float64_forward_and_backward(seed, torch_references):
    rows = verification_report(torch_references, torch.float64, seed=seed, kernels=REFERENCE_KERNELS)
    statistics = ("KV", "dropout, training: share", "sdpa, dropout: share")  # outputs alone: nothing to differentiate
    assert len(rows) > 20 and all(row.grad is not None for row in rows if not row.component.startswith(statistics))
    assert _failures(rows) == [], format_report(rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_reference_and_fast_sets_agree_in_float64_on_every_verification_case(seed):
    rows = verification_report(FAST, torch.float64, seed=seed, kernels=REFERENCE_KERNELS)
    assert _failures(rows) == [], format_report(rows)
    attention = [row for row in rows if row.component.startswith("sdpa") and "dropout" not in row.component]
    assert len(attention) == 7 and max(row.grad for row in attention) > 0  # a real comparison, not 0 by identity


def test_each_reference_kernel_is_the_definition_in_reference_py():
    for slot in ("attention", "layer_norm", "gelu", "cross_entropy"):
        assert getattr(REFERENCE_KERNELS, slot) is getattr(reference, slot)
    assert REFERENCE_KERNELS.sampling_softmax is reference.softmax


def test_the_reference_cross_entropy_of_nothing_scored_is_nan_as_in_pytorch():
    logits = torch.randn(3, 5, dtype=torch.float64)
    targets = torch.full((3,), IGNORE_INDEX)
    assert reference.cross_entropy(logits, targets).isnan()
    assert F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX).isnan()


@pytest.mark.parametrize(
    "fields",
    [{"pos": "learned"}, {"pos": "rope"}, {"pos": "none", "bias": False, "tie_weights": False}],
    ids=["learned", "rope", "none-no-bias-untied"],
)
def test_a_reference_model_has_the_fast_models_logits_loss_and_gradients_in_float64(gen, fields):
    config = GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=16, **fields)
    fast = GPT(config).double()
    slow = GPT(config, REFERENCE_KERNELS).double()
    slow.load_state_dict(fast.state_dict())
    idx = torch.randint(13, (3, 12), generator=gen)
    targets = torch.randint(13, (3, 12), generator=gen)
    targets[:, ::4] = IGNORE_INDEX
    a, b = fast(idx, targets), slow(idx, targets)
    a.loss.backward()
    b.loss.backward()
    assert (a.logits - b.logits).abs().max() <= TOL and (a.loss - b.loss).abs() <= TOL
    for (name, p), q in zip(fast.named_parameters(), slow.parameters(), strict=True):
        assert (p.grad - q.grad).abs().max() <= TOL, name
    assert min(p.grad.abs().max() for p in fast.parameters()) > 0  # every gradient is a real one


def test_a_reference_model_decodes_with_the_cache_as_it_runs_in_full(gen):
    config = GPTConfig(vocab_size=13, block_size=16, n_layer=2, n_head=2, n_embd=16, pos="rope")
    model = GPT(config, REFERENCE_KERNELS).double().eval()
    idx = torch.randint(13, (2, 10), generator=gen)
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache(2, 10)
        steps = [model(idx[:, :4], cache=cache).logits]
        steps += [model(idx[:, t : t + 1], cache=cache).logits for t in range(4, 10)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-10


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_reference_model_trains(gen, dropout):
    """A tiny problem (copy the input) that the loss must fall on, with attention dropout too."""
    config = GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, n_embd=32, dropout=dropout)
    model = GPT(config, REFERENCE_KERNELS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(7, (16, 8), generator=gen)
    losses = []
    for _ in range(60):
        loss = model(idx, idx).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_the_reference_attention_applies_its_dropout_only_when_asked(gen):
    q, k, v = (torch.randn(2, 2, 5, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    plain = reference.attention(q, k, v, True)
    assert torch.equal(reference.attention(q, k, v, True, dropout_p=0.0), plain)
    torch.manual_seed(0)
    assert not torch.equal(reference.attention(q, k, v, True, dropout_p=0.5), plain)
    config = GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8, dropout=0.1)
    GPT(config, dataclasses.replace(REFERENCE_KERNELS))  # a model with dropout accepts the reference attention


def _hessian_times(model: GPT, v: list[torch.Tensor], idx: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
    """H v, H the Hessian of the loss in the model's parameters: the gradient of (gradient . v)."""
    params = list(model.parameters())
    grads = torch.autograd.grad(model(idx, targets).loss, params, create_graph=True)
    return list(torch.autograd.grad(sum((g * u).sum() for g, u in zip(grads, v, strict=True)), params))


def test_a_reference_model_gives_hessian_vector_products_equal_to_central_differences_of_its_gradient(gen):
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    model = GPT(config, REFERENCE_KERNELS).double()
    idx, targets = torch.randint(11, (2, 8), generator=gen), torch.randint(11, (2, 8), generator=gen)
    params = list(model.parameters())
    v = [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]
    hv = _hessian_times(model, v, idx, targets)
    eps = 1e-5

    def gradient_at(step: float) -> tuple[torch.Tensor, ...]:
        moved = GPT(config, REFERENCE_KERNELS).double()
        moved.load_state_dict(model.state_dict())
        with torch.no_grad():
            for p, u in zip(moved.parameters(), v, strict=True):
                p.add_(step * u)
        return torch.autograd.grad(moved(idx, targets).loss, list(moved.parameters()))

    central = [(a - b) / (2 * eps) for a, b in zip(gradient_at(eps), gradient_at(-eps), strict=True)]
    scale = max(c.abs().max() for c in central)
    assert scale > 1.0  # a real curvature, not zero by construction
    assert max((a - b).abs().max() for a, b in zip(hv, central, strict=True)) <= 1e-5 * scale


@pytest.mark.parametrize("slot", ["attention", "layer_norm", "gelu", "cross_entropy"])
def test_a_fast_kernel_refuses_a_second_derivative_rather_than_give_one_missing_terms(gen, slot):
    """Differentiated again, it would silently drop every term through what it saved (kernels/once.py)."""
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)
    model = GPT(config, dataclasses.replace(REFERENCE_KERNELS, **{slot: getattr(FAST_KERNELS, slot)})).double()
    idx, targets = torch.randint(11, (2, 8), generator=gen), torch.randint(11, (2, 8), generator=gen)
    v = [torch.ones_like(p) for p in model.parameters()]
    with pytest.raises(RuntimeError, match=f"kernels.{slot}'s backward differentiates once.*REFERENCE_KERNELS"):
        _hessian_times(model, v, idx, targets)
    model.zero_grad()
    model(idx, targets).loss.backward()  # one derivative: as before
    assert all(p.grad is not None for p in model.parameters())
