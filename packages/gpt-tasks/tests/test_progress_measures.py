"""Grokking's progress measures on constructed cases whose right values are known: the key frequencies of an
embedding built from them, a restricted loss equal to the full loss for logits made of the key frequencies
alone, an excluded loss at chance for them, and the weight norm."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from waves import waves

from gpt_core import GPTOutput
from gpt_tasks.builtin.progress_measures import (
    ProgressMeasures,
    answer_accuracy,
    answer_loss,
    excluded_logits,
    key_frequencies,
    pair_logits,
    restricted_logits,
    sum_waves,
    weight_norm,
)

P = 113
KEYS = (4, 17, 33)


def fourier_logits(p: int, frequencies, scale: float = 3.0, equals: float = -5.0) -> torch.Tensor:
    """(p * p, p + 1): logit of answer c for pair (a, b) = scale * sum_k cos(2 pi k (a + b - c) / p), the
    Fourier circuit's output; "=" gets the constant `equals`."""
    ids = torch.arange(p * p, dtype=torch.float64)
    total = (ids.div(p, rounding_mode="floor") + ids.remainder(p))[:, None]
    c = torch.arange(p, dtype=torch.float64)[None, :]
    numbers = scale * sum(torch.cos(2 * math.pi * k * (total - c) / p) for k in frequencies)
    return torch.cat((numbers, torch.full((p * p, 1), equals, dtype=torch.float64)), dim=1)


class FourierCircuit(nn.Module):
    """A model whose number embedding is built from KEYS and whose logits at "=" are `fourier_logits`."""

    def __init__(self, p: int):
        super().__init__()
        self.p = p
        self.wte = nn.Module()
        noise = 0.01 * torch.randn(p, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        numbers = waves(p, dict.fromkeys(KEYS, 1.0), dim=64) + noise
        self.wte.weight = nn.Parameter(torch.cat((numbers, torch.ones(1, 64))))  # "=" is row p
        self.table = fourier_logits(p, KEYS)

    def forward(self, idx, read=None):
        logits = torch.zeros(*idx.shape, self.p + 1, dtype=torch.float64)
        logits[:, -1] = self.table[idx[:, 0] * self.p + idx[:, 1]]
        return GPTOutput(logits, None)


def test_the_key_frequencies_are_those_the_embedding_is_built_from():
    embedding = waves(P, {4: 1.0, 17: 0.9, 33: 0.7}, dim=64)
    embedding += 0.02 * torch.randn(P, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert key_frequencies(embedding) == [4, 17, 33]


def test_a_random_embedding_has_no_key_frequency():
    assert key_frequencies(torch.randn(P, 128, generator=torch.Generator().manual_seed(0))) == []


@pytest.mark.parametrize("p", [113, 23, 8])
def test_the_sum_waves_are_orthonormal(p):
    basis = sum_waves(p, range(1, p // 2 + 1))
    assert basis.shape == (p * p, 2 * (p // 2) - (p % 2 == 0))  # sin(pi (a + b)) vanishes for an even p
    assert torch.allclose(basis.T @ basis, torch.eye(basis.shape[1], dtype=torch.float64), atol=1e-10)
    assert torch.allclose(basis.sum(dim=0), torch.zeros(basis.shape[1], dtype=torch.float64), atol=1e-9)


def test_logits_of_the_key_frequencies_alone_lose_nothing_when_restricted_and_everything_when_excluded():
    logits, ids = fourier_logits(P, KEYS), torch.arange(P * P)
    restricted, excluded = restricted_logits(logits, P, KEYS), excluded_logits(logits, P, KEYS)
    assert torch.allclose(restricted, logits, atol=1e-12)
    assert answer_loss(restricted, P, ids) == pytest.approx(answer_loss(logits, P, ids), abs=1e-12)
    assert torch.allclose(excluded[:, :P], torch.zeros(P * P, P, dtype=torch.float64), atol=1e-12)
    assert answer_loss(excluded, P, ids) == pytest.approx(math.log(P + math.exp(-5.0)), abs=1e-12)  # chance


def test_restricting_to_other_frequencies_leaves_only_the_mean():
    logits = fourier_logits(P, KEYS)
    restricted = restricted_logits(logits, P, [5, 9])
    assert torch.allclose(restricted[:, :P], torch.zeros(P * P, P, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(excluded_logits(logits, P, [5, 9]), logits, atol=1e-12)


def test_restricted_and_excluded_logits_split_any_logits_and_keep_equals():
    logits = torch.randn(P * P, P + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    restricted, excluded = restricted_logits(logits, P, KEYS), excluded_logits(logits, P, KEYS)
    mean = logits[:, :P].mean(dim=0, keepdim=True)
    assert torch.allclose(restricted[:, :P] - mean + excluded[:, :P], logits[:, :P], atol=1e-12)
    assert torch.equal(restricted[:, P], logits[:, P]) and torch.equal(excluded[:, P], logits[:, P])


def test_a_fourier_circuits_measures_are_its_losses_with_its_own_key_frequencies(modadd_task):
    model = FourierCircuit(P)
    keys = key_frequencies(model.wte.weight[:P])
    assert keys == list(KEYS)
    measures = ProgressMeasures.of(model, modadd_task, keys)
    assert measures.restricted_loss == pytest.approx(measures.heldout_loss, abs=1e-12)
    assert measures.heldout_loss == pytest.approx(measures.train_loss, abs=1e-2)  # the circuit generalises
    assert measures.excluded_loss == pytest.approx(math.log(P + math.exp(-5.0)), abs=1e-12)


def test_pair_logits_are_the_logits_at_equals_in_pair_order(modadd_task, tiny_model):
    model = tiny_model(modadd_task)
    ids = torch.tensor([0, 1, 114, 5000, P * P - 1])
    expected = model(modadd_task.examples(ids).inputs).logits[:, -1].double()
    assert torch.allclose(pair_logits(model, modadd_task)[ids], expected, atol=1e-6)


def test_an_untrained_models_losses_are_the_evaluations(modadd_task, tiny_model):
    model = tiny_model(modadd_task)
    measures = ProgressMeasures.of(model, modadd_task, [1, 2])
    for split in ("train", "heldout"):
        evaluation = modadd_task.evaluate(model, split, "cpu")
        assert getattr(measures, f"{split}_loss") == pytest.approx(evaluation["loss"], abs=1e-5)
        assert getattr(measures, f"{split}_accuracy") == pytest.approx(evaluation["accuracy"], abs=1e-12)


def test_a_fourier_circuit_answers_every_pair():
    logits, ids = fourier_logits(P, KEYS), torch.arange(P * P)
    assert answer_accuracy(logits, P, ids) == 1.0
    assert answer_accuracy(-logits, P, ids) == 0.0  # its answer's logit is then the smallest


def test_the_weight_norm_is_the_norm_of_every_parameter_together():
    layer = nn.Linear(3, 4)
    with torch.no_grad():
        layer.weight.fill_(1.0)
        layer.bias.fill_(2.0)
    assert weight_norm(layer) == pytest.approx(math.sqrt(12 * 1.0 + 4 * 4.0), abs=1e-12)
