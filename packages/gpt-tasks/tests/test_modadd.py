"""modadd: the space-separated vocabulary, full-batch training data, accuracy/loss at "=", and the
Fourier spectrum of the number embedding with its progress measure."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from waves import waves

from gpt_core import IGNORE_INDEX, GPTOutput
from gpt_tasks.builtin.modadd import FOURIER_SHARE, fourier_spectrum, top_frequency_share


def test_encode_decode_round_trip_and_labels(modadd_task):
    ids = modadd_task.encode("5 17 = 22")
    assert ids == [5, 17, 113, 22]
    assert modadd_task.decode(ids) == "5 17 = 22"
    assert modadd_task.token_labels([0, 112, 113]) == ["0", "112", "="]
    assert modadd_task.vocab_size == 114 and modadd_task.block_size == 3


@pytest.mark.parametrize("text", ["113", "5 + 3", "-1", "1 2 =x"])
def test_encode_refuses_tokens_outside_the_vocabulary(modadd_task, text):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        modadd_task.encode(text)


def test_a_batch_as_large_as_the_training_set_is_the_whole_set_in_a_fixed_order(modadd_task):
    n_train = modadd_task.split.count("train")
    first = modadd_task.batch(n_train, torch.Generator().manual_seed(0))
    again = modadd_task.batch(10**6, torch.Generator().manual_seed(1))
    assert first.inputs.shape == first.targets.shape == (n_train, 3)
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    pairs = (first.inputs[:, 0] * 113 + first.inputs[:, 1]).tolist()
    assert pairs == modadd_task.split.ids("train").tolist()


def test_targets_are_the_sum_mod_p_at_equals_only(modadd_task):
    batch = modadd_task.batch(200, torch.Generator().manual_seed(0))
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert (batch.inputs[:, 2] == 113).all()
    assert (batch.targets[:, :2] == IGNORE_INDEX).all()
    assert torch.equal(batch.targets[:, 2], (batch.inputs[:, 0] + batch.inputs[:, 1]) % 113)


def test_a_smaller_batch_is_a_random_sample_of_distinct_training_pairs(modadd_task):
    one = modadd_task.batch(200, torch.Generator().manual_seed(0))
    two = modadd_task.batch(200, torch.Generator().manual_seed(1))
    pairs = (one.inputs[:, 0] * 113 + one.inputs[:, 1]).tolist()
    assert len(set(pairs)) == 200
    assert set(pairs) <= set(modadd_task.split.ids("train").tolist())
    assert not torch.equal(one.inputs, two.inputs)


def test_evaluate_covers_the_whole_split_of_an_untrained_model(modadd_task, tiny_model):
    for split in modadd_task.eval_splits:
        metrics = modadd_task.evaluate(tiny_model(modadd_task), split, "cpu")
        assert metrics["examples"] == modadd_task.split.count(split)
        assert 0.0 <= metrics["accuracy"] <= 0.05  # about chance, 1/113
        assert metrics["loss"] == pytest.approx(math.log(114), abs=0.1)


class Oracle(nn.Module):
    """Logits putting all their weight on (a + b) mod p, or on the next number when `wrong`; its
    embedding is a single wave."""

    def __init__(self, p: int, wrong: bool):
        super().__init__()
        self.p, self.wrong = p, wrong
        self.wte = nn.Module()
        self.wte.weight = nn.Parameter(torch.cat((waves(p, {7: 1.0}), torch.ones(1, 12))))  # "=" is row p

    def forward(self, idx, read=None):
        answer = (idx[:, 0] + idx[:, 1] + int(self.wrong)) % self.p
        logits = torch.zeros(*idx.shape, self.p + 1)
        logits[:, -1, :].scatter_(1, answer[:, None], 30.0)
        return GPTOutput(logits if read is None else logits[read], None)


def test_accuracy_and_loss_are_measured_at_equals(modadd_task):
    right = modadd_task.evaluate(Oracle(113, wrong=False), "heldout", "cpu", limit=1000)
    assert right["examples"] == 1000 and right["accuracy"] == 1.0 and right["loss"] < 1e-6
    wrong = modadd_task.evaluate(Oracle(113, wrong=True), "heldout", "cpu", limit=1000)
    assert wrong["accuracy"] == 0.0 and wrong["loss"] == pytest.approx(30.0, abs=1e-3)


@pytest.mark.parametrize("p", [113, 10])
def test_the_spectrum_finds_exactly_the_frequencies_an_embedding_is_built_from(p):
    frequencies = {113: {3: 1.0, 17: 0.5, 41: 2.0, 56: 0.25}, 10: {1: 1.0, 4: 0.3, 5: 0.7}}[p]  # 5 = p / 2
    embedding = waves(p, frequencies, offset=0.4)
    spectrum = fourier_spectrum(embedding)
    assert spectrum.shape == (p // 2 + 1,)
    found = {k for k, power in enumerate(spectrum.tolist()) if power > 1e-9 * float(spectrum.max())}
    assert found == {0, *frequencies}
    assert float(spectrum.sum()) == pytest.approx(p * float(embedding.square().sum()), rel=1e-12)  # Parseval
    assert top_frequency_share(spectrum, top=len(frequencies)) == pytest.approx(1.0, abs=1e-12)


def test_the_strongest_frequencies_carry_the_share_in_proportion_to_their_power():
    spectrum = fourier_spectrum(waves(113, {3: 1.0, 5: 1.0, 8: 1.0, 9: 1.0, 30: 1.0, 50: 2.0}, dim=64))
    assert top_frequency_share(spectrum, top=1) == pytest.approx(4 / 9, rel=0.05)  # amplitude 2: power 4 of 9
    assert top_frequency_share(spectrum) == pytest.approx(8 / 9, rel=0.05)


def test_a_random_embedding_spreads_its_power_over_all_frequencies():
    spectrum = fourier_spectrum(torch.randn(113, 128, generator=torch.Generator().manual_seed(0)))
    assert 5 / 56 < top_frequency_share(spectrum) < 0.15  # 5 of 56 frequencies, plus the luck of the top 5


def test_the_embeddings_fourier_share_is_a_probe_under_one_name_not_a_metric_of_each_split(modadd_task, tiny_model):
    """A property of the weights: logged once, as the probe, where each split's metrics repeated it."""
    model = tiny_model(modadd_task)
    expected = top_frequency_share(fourier_spectrum(model.wte.weight[:113]))
    assert modadd_task.probes(model, None) == {FOURIER_SHARE: expected}
    assert FOURIER_SHARE == "fourier_top5_share"
    assert not any(FOURIER_SHARE in modadd_task.evaluate(model, split, "cpu", 50) for split in modadd_task.eval_splits)
    assert modadd_task.probes(Oracle(113, wrong=False), None)[FOURIER_SHARE] == pytest.approx(1.0)


def test_defaults_train_on_the_full_batch(modadd_task):
    train = modadd_task.defaults().train
    assert train["batch_size"] == modadd_task.split.count("train")
    assert train["eval_limit"] >= modadd_task.split.size
    assert (train["weight_decay"], train["schedule"], train["beta2"]) == (1.0, "constant", 0.98)


def test_prompts_and_attention_examples_are_heldout_inputs(modadd_task):
    heldout = set(modadd_task.split.ids("heldout").tolist())
    examples = modadd_task.attention_examples(4)
    assert len(set(examples)) == 4
    for text in [*modadd_task.example_prompts(), *examples]:
        a, b, equals = modadd_task.encode(text)
        assert equals == 113 and a * 113 + b in heldout
