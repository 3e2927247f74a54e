"""The examples a run's attention is kept on: several per task, in a fixed order, and tasks written for the
one-example contract (`attention_example` alone) still complete."""

from __future__ import annotations

import pytest

from gpt_tasks import Task, get_task
from gpt_tasks.builtin.sort import SortTask


def test_every_builtin_task_gives_n_distinct_examples_that_fit_its_block(builtin_tasks):
    for task in builtin_tasks:
        examples = task.attention_examples(4)
        assert len(examples) == 4 and len(set(examples)) == 4, task.name
        assert all(0 < len(task.encode(text)) <= task.block_size for text in examples), task.name


def test_the_first_examples_do_not_depend_on_how_many_are_asked_for(builtin_tasks):
    for task in builtin_tasks:
        assert task.attention_examples(4)[:2] == task.attention_examples(2), task.name
        assert task.attention_example() == task.attention_examples(1)[0] == task.attention_examples(4)[0], task.name


class OneExampleSort(SortTask):
    """A task written for the one-example contract: it defines attention_example alone, over a base
    (PromptAnswerTask) that lists examples of its own."""

    name = "one_example_sort"

    def attention_example(self) -> str:
        return "31415911345"


def test_a_task_defining_only_attention_example_shows_that_one_example(sort_task):
    task = OneExampleSort(sort_task.params)
    assert task.attention_examples(4) == ["31415911345"]
    assert task.attention_example() == "31415911345"
    assert get_task("sort").attention_examples(4) != ["31415911345"]  # the base class is left alone


def test_a_task_defining_neither_method_cannot_be_built():
    everything_else = {name: lambda *args: None for name in Task.__abstractmethods__ - {"attention_examples"}}
    incomplete = type("Incomplete", (Task,), everything_else)
    with pytest.raises(TypeError, match="abstract method attention_examples"):
        incomplete(None)
