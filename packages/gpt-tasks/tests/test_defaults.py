"""Every built-in task's defaults() describe a model and a run that can actually be built."""

from __future__ import annotations

import pytest

from gpt_core import GPT, GPTConfig
from gpt_tasks import TrainDefaults, get_task, list_tasks


@pytest.fixture
def builtin_tasks(sort_task, addition_task, modadd_task, corpus_file):
    shakespeare = get_task("shakespeare", data=str(corpus_file))  # default block_size and chunk_size
    return [sort_task, addition_task, modadd_task, shakespeare]


def test_every_builtin_task_is_covered(builtin_tasks):
    builtin = {info.name for info in list_tasks() if info.plugin == "builtin"}
    assert {task.name for task in builtin_tasks} == builtin


def test_defaults_build_a_valid_model_and_run(builtin_tasks):
    for task in builtin_tasks:
        defaults = task.defaults()
        assert isinstance(defaults, TrainDefaults)
        config = GPTConfig(vocab_size=task.vocab_size, block_size=task.block_size, **defaults.model)
        model = GPT(config)
        assert model.num_parameters() < 2_000_000, task.name  # CPU-sized
        assert defaults.schedule in ("cosine", "constant")
        assert defaults.steps > 0 and defaults.batch_size > 0 and defaults.eval_limit > 0
        assert 0 < defaults.min_lr <= defaults.lr and 0 <= defaults.warmup_steps < defaults.steps
        assert all(0 <= beta < 1 for beta in defaults.betas)


def test_primary_metric_is_among_the_metrics_evaluate_returns(builtin_tasks, tiny_model):
    for task in builtin_tasks:
        metrics = task.evaluate(tiny_model(task), "heldout", "cpu", limit=8)
        assert task.primary_metric in metrics, task.name
        assert set(task.eval_splits) <= {"train", "heldout"}
