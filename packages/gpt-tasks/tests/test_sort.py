"""sort: vocabulary, batches, and the exact-match evaluation."""

from __future__ import annotations

import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import get_task, is_heldout, prompt_answer


def test_encode_decode_round_trip(sort_task):
    assert sort_task.decode(sort_task.encode("9301")) == "9301"
    assert sort_task.encode("0219") == [0, 2, 1, 9]


def test_encode_refuses_characters_outside_the_vocabulary():
    with pytest.raises(ValueError, match="not in the vocabulary: 'a'"):
        get_task("sort", vocab=5, length=3).encode("01a")
    with pytest.raises(ValueError, match="'7'"):
        get_task("sort", vocab=5, length=3).encode("7")


def test_batch_scores_only_the_sorted_tail(sort_task):
    batch = sort_task.batch(32, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (32, 11)
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert (batch.targets[:, :5] == IGNORE_INDEX).all()
    assert torch.equal(batch.targets[:, 5:], batch.inputs[:, :6].sort(dim=1).values)


def test_evaluate_on_an_untrained_model_equals_greedy_decoding_by_hand(sort_task, tiny_model, greedy_by_hand):
    model = tiny_model(sort_task).double()
    metrics = sort_task.evaluate(model, "heldout", "cpu", limit=64)
    expected = greedy_by_hand(sort_task, model, sort_task.split.evaluation_ids("heldout", 64))
    assert metrics == expected
    assert metrics["examples"] == 64 and metrics["token_accuracy"] > 0  # not a comparison of zeros


def oracle_generate(wrong: bool):
    """A stand-in for gpt_core.generate that writes the sorted prompt (plus one, mod 10, if wrong)."""

    def generate(model, idx, max_new_tokens, temperature=1.0, **kwargs):
        assert temperature == 0.0  # exact match is scored on greedy decoding
        answer = idx.sort(dim=1).values[:, :max_new_tokens]
        return torch.cat((idx, (answer + 1) % 10 if wrong else answer), dim=1)

    return generate


@pytest.mark.parametrize(("wrong", "expected"), [(False, 1.0), (True, 0.0)])
def test_exact_match_counts_exactly_the_right_answers(sort_task, tiny_model, monkeypatch, wrong, expected):
    monkeypatch.setattr(prompt_answer, "generate", oracle_generate(wrong))
    metrics = sort_task.evaluate(tiny_model(sort_task), "heldout", "cpu", limit=500)
    assert metrics["exact_match"] == expected
    assert metrics["position_0_accuracy"] == expected


def test_full_evaluation_scores_every_heldout_example(sort_task, tiny_model, monkeypatch):
    monkeypatch.setattr(prompt_answer, "generate", oracle_generate(False))
    metrics = sort_task.evaluate(tiny_model(sort_task), "heldout", "cpu")
    assert metrics["examples"] == 250_050 and metrics["exact_match"] == 1.0


def test_learned_positions_cannot_evaluate_longer_runs_than_trained(tiny_model):
    model = tiny_model(get_task("sort", length=6))  # block_size 11
    with pytest.raises(ValueError, match="learned positions"):
        get_task("sort", length=8).evaluate(model, "heldout", "cpu", limit=16)


def test_rope_model_evaluates_runs_longer_than_trained(tiny_model, greedy_by_hand):
    model = tiny_model(get_task("sort", length=6), pos="rope").double()  # block_size 11
    longer = get_task("sort", length=7)  # block_size 13
    metrics = longer.evaluate(model, "heldout", "cpu", limit=32)
    assert metrics == greedy_by_hand(longer, model, longer.split.evaluation_ids("heldout", 32))
    assert metrics["examples"] == 32 and "position_6_accuracy" in metrics


def test_prompts_and_attention_example_are_heldout_text(sort_task):
    for prompt in sort_task.example_prompts():
        assert len(prompt) == 6 and is_heldout_run(prompt)
    example = sort_task.attention_example()
    assert len(example) == sort_task.block_size and is_heldout_run(example[:6])
    assert example[6:] == "".join(sorted(example[:6]))[:5]


def is_heldout_run(text: str) -> bool:
    return is_heldout(bytes(int(ch) for ch in text), 0.25, b"sort")


def test_example_space_must_fit_int64():
    from gpt_tasks import ParamError, get_task

    with pytest.raises(ParamError, match="2\\*\\*62"):
        get_task("sort", length=40)
