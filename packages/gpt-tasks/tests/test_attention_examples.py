"""The examples a run's attention is kept on: several per task, in a fixed order."""

from __future__ import annotations

import pytest

from gpt_tasks import Task


def test_every_builtin_task_gives_n_distinct_examples_that_fit_its_block(builtin_tasks):
    for task in builtin_tasks:
        examples = task.attention_examples(4)
        assert len(examples) == 4 and len(set(examples)) == 4, task.name
        assert all(0 < len(task.encode(text)) <= task.block_size for text in examples), task.name


def test_the_first_examples_do_not_depend_on_how_many_are_asked_for(builtin_tasks):
    for task in builtin_tasks:
        assert task.attention_examples(4)[:2] == task.attention_examples(2), task.name
        assert task.attention_examples(1) == task.attention_examples(4)[:1], task.name


def test_a_task_without_attention_examples_cannot_be_built():
    everything_else = {name: lambda *args: None for name in Task.__abstractmethods__ - {"attention_examples"}}
    incomplete = type("Incomplete", (Task,), everything_else)
    with pytest.raises(TypeError, match="abstract method '?attention_examples"):  # quoted from Python 3.12
        incomplete(None)
