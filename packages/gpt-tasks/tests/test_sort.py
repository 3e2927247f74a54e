"""sort: vocabulary, batches, and the exact-match evaluation."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import get_task, is_heldout


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


def sorted_prompt(wrong: bool):
    """The answer of a model that sorts its prompt (plus one, mod 10, if wrong)."""
    return lambda prompt: (prompt.sort(dim=1).values + 1) % 10 if wrong else prompt.sort(dim=1).values


@pytest.mark.parametrize(("wrong", "expected"), [(False, 1.0), (True, 0.0)])
def test_exact_match_counts_exactly_the_right_answers(sort_task, oracle, wrong, expected):
    metrics = sort_task.evaluate(oracle(sort_task, sorted_prompt(wrong)), "heldout", "cpu", limit=500)
    assert metrics["exact_match"] == expected
    assert metrics["position_0_accuracy"] == expected


def test_full_evaluation_scores_every_heldout_example(sort_task, oracle):
    metrics = sort_task.evaluate(oracle(sort_task, sorted_prompt(False)), "heldout", "cpu")
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


def test_prompts_and_attention_examples_are_heldout_text(sort_task):
    for prompt in sort_task.example_prompts():
        assert len(prompt) == 6 and is_heldout_run(prompt)
    examples = sort_task.attention_examples(4)
    assert len(set(examples)) == 4
    for example in examples:
        assert len(example) == sort_task.block_size and is_heldout_run(example[:6])
        assert example[6:] == "".join(sorted(example[:6]))[:5]


def is_heldout_run(text: str) -> bool:
    return is_heldout(bytes(int(ch) for ch in text), 0.25, b"sort")


def test_example_space_must_fit_int64():
    from gpt_tasks import ParamError, get_task

    with pytest.raises(ParamError, match="2\\*\\*62"):
        get_task("sort", length=40)


# the seed task as published, and the options that make length generalisation possible ---------------------
def test_default_task_is_the_seed_task_exactly(sort_task):
    """Pinned from the task before the separator and min_length existed: the published sort result was
    trained on these batches and scored on this split."""
    batch = sort_task.batch(3, torch.Generator().manual_seed(0))
    assert batch.inputs.tolist() == [
        [0, 5, 7, 4, 9, 2, 0, 2, 4, 5, 7],
        [2, 2, 3, 5, 5, 0, 0, 2, 2, 3, 5],
        [8, 9, 2, 4, 3, 7, 2, 3, 4, 7, 8],
    ]
    assert sort_task.split.ids("heldout")[:6].tolist() == [0, 1, 4, 9, 11, 20]
    assert sort_task.example_prompts() == ["951298", "147870", "705996"]
    assert (sort_task.vocab_size, sort_task.block_size, sort_task.params.lengths) == (10, 11, range(6, 7))


def test_min_length_equal_to_length_draws_the_same_batches(sort_task):
    same = get_task("sort", min_length=6)
    for seed in range(3):
        a, b = (task.batch(16, torch.Generator().manual_seed(seed)) for task in (sort_task, same))
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def test_separator_sits_between_the_input_and_its_sorted_order():
    task = get_task("sort", length=4, separator=True)
    assert (task.vocab_size, task.prompt_length, task.answer_length, task.block_size) == (11, 5, 4, 8)
    assert task.encode("3120=0123") == [3, 1, 2, 0, 10, 0, 1, 2, 3]
    assert task.decode(task.sequences(torch.tensor([3120]))[0].tolist()) == "3120=0123"
    batch = task.batch(64, torch.Generator().manual_seed(0))
    assert (batch.inputs[:, 4] == 10).all()
    assert (batch.targets[:, :4] == IGNORE_INDEX).all()  # the separator is read, not scored
    assert torch.equal(batch.targets[:, 4:], batch.inputs[:, :4].sort(dim=1).values)
    assert all(prompt.endswith("=") and len(prompt) == 5 for prompt in task.example_prompts())


@pytest.mark.parametrize("options", [{"separator": True}, {"separator": True, "min_length": 1}])
def test_split_does_not_depend_on_the_separator_or_the_mix(sort_task, options):
    assert torch.equal(get_task("sort", **options).split.ids("heldout"), sort_task.split.ids("heldout"))


def test_mixed_lengths_draw_one_length_per_batch_each_from_its_own_train_split():
    task = get_task("sort", length=5, min_length=2, separator=True)
    generator = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(40):
        batch = task.batch(32, generator)
        length = (batch.inputs.shape[1] + 1) // 2  # input, separator, answer minus its last token
        seen.add(length)
        assert (batch.inputs[:, length] == 10).all()
        assert torch.equal(batch.targets[:, length:], batch.inputs[:, :length].sort(dim=1).values)
        runs = [bytes(row) for row in batch.inputs[:, :length].tolist()]
        assert not any(is_heldout(run, 0.25, b"sort") for run in runs)  # its length's own split, train side
    assert seen == {2, 3, 4, 5}
    alone = get_task("sort", length=3)
    assert torch.equal(task.split_at(3).ids("heldout"), alone.split.ids("heldout"))


def test_mixed_task_evaluates_and_prompts_at_its_longest_length():
    task = get_task("sort", length=5, min_length=1, separator=True)
    assert (task.prompt_length, task.answer_length, task.block_size) == (6, 5, 10)
    assert task.split.size == 10**5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_length": 0}, r"min_length must be between 1 and length \(6\), got 0"),
        ({"min_length": 7}, r"min_length must be between 1 and length \(6\), got 7"),
        ({"min_length": 3}, r"min_length below length needs separator=true"),
    ],
)
def test_bad_min_length_is_refused(options, message):
    from gpt_tasks import ParamError

    with pytest.raises(ParamError, match=message):
        get_task("sort", **options)


def test_separator_model_evaluates_longer_runs_than_trained(tiny_model, greedy_by_hand):
    model = tiny_model(get_task("sort", length=4, separator=True), pos="none").double()
    longer = get_task("sort", length=7, separator=True)
    metrics = longer.evaluate(model, "heldout", "cpu", limit=32)
    assert metrics == greedy_by_hand(longer, model, longer.split.evaluation_ids("heldout", 32))


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_randomized_model_evaluates_past_its_block_the_same_every_time(tiny_model, pos):
    """Evaluation draws a randomized model's position ids from its own seeded generator, not the global RNG
    (a training run's stream), so two evaluations agree; learned positions read up to max_positions, past
    the trained block."""
    model = tiny_model(get_task("sort", length=4, separator=True), pos=pos, max_positions=32, randomized_positions=True)
    longer = get_task("sort", length=10, separator=True)  # 20 positions read, block_size 8
    state = torch.get_rng_state()
    first = longer.evaluate(model, "heldout", "cpu", limit=64)
    assert torch.equal(torch.get_rng_state(), state)
    assert first == longer.evaluate(model, "heldout", "cpu", limit=64) and first["examples"] == 64


MIXED = {"length": 5, "min_length": 2, "separator": True}


@pytest.mark.parametrize(("options", "lengths"), [({}, (6,)), (MIXED, (3, 4, 5, 6))])
def test_prompt_lengths_are_those_training_draws_each_answered_by_one_token_per_input_symbol(options, lengths):
    task = get_task("sort", **options)
    assert task.prompt_lengths == lengths
    generator = torch.Generator().manual_seed(0)
    drawn = set()
    for _ in range(40):
        batch = task.batch(8, generator)
        scored = (batch.targets[0] != IGNORE_INDEX).nonzero().squeeze(1)
        prompt = int(scored[0]) + 1  # the first answer token is predicted from the prompt's last position
        drawn.add(prompt)
        assert task.answer_length_for(prompt) == len(scored)
    assert drawn == set(lengths)
    assert task.answer_length_for(4 + task.params.separator) == 4  # an untrained length: still one per symbol


def test_an_absurd_length_is_refused_at_once_not_after_computing_vocab_to_its_power():
    refuse = "import gpt_tasks\ntry: gpt_tasks.get_task('sort', length=10**9)\nexcept ValueError as e: print(e)"
    said = subprocess.run([sys.executable, "-c", refuse], capture_output=True, text=True, timeout=60).stdout
    assert "vocab ** length must stay below 2**62" in said  # 10**(10**9) would take hours to compute
