"""The run schema's key grammar (gpt_viz.run_layout) holds for what gpt-tasks actually reports.

gpt-tasks cannot import gpt-viz (neither depends on a sibling but gpt-core), so the task metric names
are written by the tasks and read back by the grammar: this is where the two are held together.
"""

from __future__ import annotations

import pytest
import torch

import gpt_tasks
from gpt_core import GPT
from gpt_tasks import get_task
from gpt_viz import EXAMPLES, metric_key, parse_metric_key

TASKS = {
    "sort": {"length": 4},
    "addition": {"digits": 2},
    "modadd": {"p": 11},
}


def per_position_metrics(task: gpt_tasks.Task) -> set[str]:
    """What a task reports per answer position, as the task itself names the positions."""
    if not isinstance(task, gpt_tasks.PromptAnswerTask):
        return set()
    return {f"{position}_accuracy" for position in task.answer_position_names()}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_reported_metric_reads_back_with_its_split_and_kind(name):
    task = get_task(name, **TASKS[name])
    torch.manual_seed(0)
    model = GPT(task.defaults().model)
    for split in task.eval_splits:
        metrics = task.evaluate(model, split, torch.device("cpu"), limit=16)
        assert metrics[EXAMPLES] == 16
        for metric in metrics:
            parsed = parse_metric_key(metric_key(split, metric))
            assert parsed is not None and (parsed.split, parsed.name) == (split, metric)
        details = {m for m in metrics if parse_metric_key(metric_key(split, m)).is_position_detail}
        assert details == per_position_metrics(task), "a per-position metric must follow <label>_<index>_<measure>"
        assert task.primary_metric in metrics and task.primary_metric not in details


def test_prompt_answer_tasks_report_one_detail_per_answer_position():
    task = get_task("addition", digits=2)
    metrics = task.evaluate(GPT(task.defaults().model), "heldout", torch.device("cpu"), limit=8)
    details = {m for m in metrics if parse_metric_key(metric_key("heldout", m)).is_position_detail}
    assert details == {f"digit_{place}_accuracy" for place in range(task.answer_length)}
