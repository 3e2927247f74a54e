"""The plugin, installed for real: discovered through its entry point, built by name, trainable."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

import gpt_tasks
from gpt_core import GPT, IGNORE_INDEX, GPTConfig
from gpt_task_reverse import ReverseParams, ReverseTask


def test_the_registry_lists_reverse_from_this_distribution():
    infos = {info.name: info for info in gpt_tasks.list_tasks()}
    assert "reverse" in infos, "is gpt-task-reverse installed? (pip install -e examples/gpt-task-reverse)"
    info = infos["reverse"]
    assert (info.plugin, info.distribution, info.version) == ("reverse", "gpt-task-reverse", "0.2.0")
    assert info.task_class is ReverseTask


def test_get_task_builds_reverse_and_its_batch_scores_the_reversed_half():
    task = gpt_tasks.get_task("reverse", length=4)
    assert (task.vocab_size, task.block_size) == (10, 7)
    batch = task.batch(64, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (64, 7)
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert (batch.targets[:, :3] == IGNORE_INDEX).all()
    assert torch.equal(batch.targets[:, 3:], batch.inputs[:, :4].flip(1))


def test_parameters_are_validated_by_the_registry():
    with pytest.raises(gpt_tasks.ParamError, match="length must be between 2 and 12"):
        gpt_tasks.get_task("reverse", length="1")


def test_training_batches_never_contain_a_heldout_run():
    task = gpt_tasks.get_task("reverse", length=4)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        for row in task.batch(256, generator).inputs[:, :4].tolist():
            assert not gpt_tasks.is_heldout(bytes(row), 0.25, b"reverse")


def oracle_hits(wrong: bool):
    """A stand-in for the model's answer check: the reversed prompt as its answer (each digit plus one, mod 10, if
    wrong), compared with the answer targets as `PromptAnswerTask.answer_hits` compares the model's argmax."""

    def answer_hits(model, batch, generator):
        answer = batch.inputs[:, :4].flip(1)
        return ((answer + 1) % 10 if wrong else answer) == batch.targets[:, -4:]

    return answer_hits


@pytest.mark.parametrize(("wrong", "expected"), [(False, 1.0), (True, 0.0)])
def test_evaluate_scores_a_perfect_answer_1_and_a_wrong_one_0(monkeypatch, wrong, expected):
    task = gpt_tasks.get_task("reverse", length=4)
    model = GPT(GPTConfig(vocab_size=10, block_size=7, n_layer=1, n_head=2, n_embd=16))
    monkeypatch.setattr(task, "answer_hits", oracle_hits(wrong))
    metrics = task.evaluate(model, "heldout", "cpu", limit=50)
    positions = [metrics[f"position_{i}_accuracy"] for i in range(4)]
    assert metrics["examples"] == 50
    assert metrics["exact_match"] == metrics["token_accuracy"] == expected and positions == [expected] * 4


def test_text_round_trips_and_the_attention_example_is_a_reversal():
    task = gpt_tasks.get_task("reverse", length=4)
    assert task.decode(task.encode("0917")) == "0917"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        task.encode("12a")
    example = task.attention_examples(1)[0]
    assert len(example) == 7 and example[4:] == example[:4][::-1][:3]


def test_single_token_corruptions_change_one_prompt_token_each():
    task = ReverseTask(ReverseParams(length=3))
    ids = torch.tensor([0, 507, 999])
    corrupted = task.sequences(task.single_token_corruptions(ids).flatten()).view(3, 27, -1)[..., :3]  # (3, 27, 3)
    assert (corrupted != task.sequences(ids)[:, None, :3]).sum(dim=-1).eq(1).all()


@pytest.mark.skipif(shutil.which("gpt-train") is None, reason="the gpt-train command is not installed")
def test_gpt_train_runs_the_plugin_task(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        ["gpt-train", "run", "--task", "reverse", "--steps", "30", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    final = json.loads((out / "final.json").read_text())
    n = gpt_tasks.get_task("reverse").split.count("heldout")
    assert final["heldout_examples"] == n  # the final evaluation scores the whole held-out split
    exact = final["heldout_exact_match"] * n
    assert exact == pytest.approx(round(exact), abs=1e-6)  # a count of whole runs
    # A run that is exactly right is right at every position.
    assert final["heldout_exact_match"] <= min(final[f"heldout_position_{i}_accuracy"] for i in range(5))
