"""addition: text form in both orders, batches, and the exact-match evaluation."""

from __future__ import annotations

import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import get_task, is_heldout


def test_text_form_pads_operands_and_sum_and_reverses_the_sum(addition_task):
    ids = torch.tensor([123 * 1000 + 456, 5 * 1000 + 7, 999 * 1000 + 999])
    texts = [addition_task.decode(row.tolist()) for row in addition_task.sequences(ids)]
    assert texts == ["123+456=9750", "005+007=2100", "999+999=8991"]
    plain = get_task("addition", digits=3, reverse=False)
    assert [plain.decode(row.tolist()) for row in plain.sequences(ids)] == [
        "123+456=0579",
        "005+007=0012",
        "999+999=1998",
    ]


def test_encode_decode_round_trip_and_unknown_characters(addition_task):
    assert addition_task.decode(addition_task.encode("123+456=9750")) == "123+456=9750"
    assert addition_task.vocab_size == 12 and addition_task.encode("+=") == [10, 11]
    with pytest.raises(ValueError, match="not in the vocabulary: '-'"):
        addition_task.encode("1-2")


@pytest.mark.parametrize("reverse", [True, False])
def test_batch_targets_are_the_sum_digits_only(reverse):
    task = get_task("addition", digits=2, reverse=reverse)
    batch = task.batch(64, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (64, task.block_size) == (64, 8)
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert (batch.targets[:, :5] == IGNORE_INDEX).all()
    for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        text = task.decode(inputs)
        a, b = int(text[0:2]), int(text[3:5])
        assert text[2] == "+" and text[5] == "="
        expected = f"{a + b:03d}"
        assert task.decode(targets[5:]) == (expected[::-1] if reverse else expected)
        assert text[6:] == task.decode(targets[5:7])  # the input holds all but the last sum digit


def test_evaluate_on_an_untrained_model_equals_greedy_decoding_by_hand(addition_task, tiny_model, greedy_by_hand):
    model = tiny_model(addition_task).double()
    with torch.no_grad():  # at init scale it writes "=" everywhere; larger weights make answers depend on the prompt
        for p in model.parameters():
            p.mul_(5.0)
    metrics = addition_task.evaluate(model, "heldout", "cpu", limit=64)
    assert metrics == greedy_by_hand(addition_task, model, addition_task.split.evaluation_ids("heldout", 64))
    assert set(metrics) == {"exact_match", "digit_accuracy", "examples"} | {f"digit_{i}_accuracy" for i in range(4)}
    assert metrics["examples"] == 64 and metrics["digit_accuracy"] > 0  # not a comparison of zeros


def true_sum(task, wrong_units: bool):
    """The answer of a model that writes the true sum of its prompt, optionally with a wrong units digit."""

    def answer(prompt):
        d = task.params.digits
        place = 10 ** torch.arange(d - 1, -1, -1)
        a, b = (prompt[:, :d] * place).sum(1), (prompt[:, d + 1 : 2 * d + 1] * place).sum(1)
        answer = task.sequences(a * 10**d + b)[:, 2 * d + 2 :]
        if wrong_units:
            units = 0 if task.params.reverse else d
            answer[:, units] = (answer[:, units] + 1) % 10
        return answer

    return answer


@pytest.mark.parametrize("reverse", [True, False])
def test_exact_match_and_digit_accuracy_are_indexed_by_place_value(reverse, oracle):
    task = get_task("addition", digits=2, reverse=reverse)
    right = task.evaluate(oracle(task, true_sum(task, wrong_units=False)), "heldout", "cpu")
    assert right["exact_match"] == right["digit_accuracy"] == 1.0
    assert right["examples"] == task.split.count("heldout")
    wrong = task.evaluate(oracle(task, true_sum(task, wrong_units=True)), "heldout", "cpu")
    assert wrong["exact_match"] == 0.0 and wrong["digit_0_accuracy"] == 0.0  # digit_0 is the units digit
    assert wrong["digit_1_accuracy"] == wrong["digit_2_accuracy"] == 1.0
    assert wrong["digit_accuracy"] == pytest.approx(2 / 3)


def test_unlistable_space_is_evaluated_on_a_fixed_sample_of_20000(oracle):
    task = get_task("addition", digits=5)
    metrics = task.evaluate(oracle(task, true_sum(task, wrong_units=False)), "heldout", "cpu")
    assert metrics["examples"] == 20_000 and metrics["exact_match"] == 1.0


def test_prompts_end_at_equals_and_attention_examples_are_heldout_inputs(addition_task):
    prompts = addition_task.example_prompts()
    assert len(prompts) == 3 and all(len(p) == 8 and p[3] == "+" and p.endswith("=") for p in prompts)
    examples = addition_task.attention_examples(4)
    assert len(set(examples)) == 4
    for example in examples:
        assert len(example) == addition_task.block_size
        assert is_heldout(bytes(int(c) for c in example[0:3] + example[4:7]), 0.1, b"addition")


@pytest.mark.parametrize("prompt", ["++++++", "1234+56=", "12=34+", "1+2=", "12+34", "12+345="])
def test_a_prompt_not_shaped_as_two_numbers_plus_and_equals_gets_a_note(prompt):
    task = get_task("addition", digits=2)
    assert task.prompt_note(task.encode("12+34=")) == ""
    note = task.prompt_note(task.encode(prompt))
    assert note.startswith("addition trains on prompts of two 2-digit numbers, '+' between and '=' after")
    assert f"this one is {prompt!r}: the model never learned to answer it" in note
