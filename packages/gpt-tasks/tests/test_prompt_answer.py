"""Exact match from one teacher-forced pass is greedy generation's exact match: on trained models, over a
whole held-out split, the same sequences are right, one by one."""

from __future__ import annotations

import pytest
import torch

from gpt_core import GPT, generate
from gpt_tasks import PromptAnswerTask, get_task
from gpt_tasks.prompt_answer import answer_batch
from gpt_tasks.task import evaluating

TASKS = {"sort, 5 digits": ("sort", {"length": 5}, 150), "addition, 2 digits": ("addition", {"digits": 2}, 300)}
"""Each: the task, its parameters, and the training steps that leave many held-out answers right and many wrong."""


def trained(task: PromptAnswerTask, steps: int) -> GPT:
    """A small model trained `steps` steps."""
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=2, n_head=4, n_embd=32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = task.batch(128, generator)
        optimizer.zero_grad()
        model(batch.inputs, batch.targets).loss.backward()
        optimizer.step()
    return model


@pytest.mark.parametrize("name", list(TASKS))
def test_every_teacher_forced_argmax_right_is_greedy_generation_right_sequence_by_sequence(name):
    task_name, params, steps = TASKS[name]
    task = get_task(task_name, **params)
    model = trained(task, steps)
    ids = task.split.ids("heldout")
    seq = task.sequences(ids)
    start = task.prompt_length
    with evaluating(model):
        generated = generate(model, seq[:, :start], max_new_tokens=task.answer_length, temperature=0.0)
        greedy_right = (generated[:, start:] == seq[:, start:]).all(dim=1)  # (N,)
        forced_right = task.answer_hits(model, answer_batch(seq, start), torch.Generator()).all(dim=1)
    assert torch.equal(forced_right, greedy_right)
    assert int(greedy_right.sum()) >= 50 and int((~greedy_right).sum()) >= 50  # both kinds, many of each
    assert task.evaluate(model, "heldout", "cpu")["exact_match"] == int(greedy_right.sum()) / len(ids)
