"""When a run evaluates: every `eval_every` steps and, early in the run, every `early_eval_every` steps up to
`early_eval_until` (sort's defaults: every 25 steps to step 250), so a curve shows a task learnt in its first
few hundred steps being learnt. Evaluating more often changes nothing the run trains."""

from __future__ import annotations

import pytest
import torch
from train_helpers import TINY, assert_one_line_error, read_metrics

from gpt_train.checkpoint import load_checkpoint
from gpt_train.config import resolve_run_config
from gpt_train.settings import TrainSettings
from gpt_viz import RunLayout


def evaluated_steps(settings: TrainSettings) -> list[int]:
    return [step for step in range(1, settings.steps + 1) if settings.evaluates_at(step)]


def test_without_an_early_schedule_a_run_evaluates_every_eval_every_steps_before_its_last():
    assert evaluated_steps(TrainSettings(steps=1000, eval_every=250)) == [250, 500, 750]


def test_an_early_schedule_adds_evaluations_up_to_its_last_step_then_the_usual_ones():
    settings = TrainSettings(steps=1200, eval_every=250, early_eval_every=25, early_eval_until=250)
    assert evaluated_steps(settings) == [*range(25, 251, 25), 500, 750, 1000]


def test_an_early_schedule_no_denser_than_eval_every_adds_nothing():
    """A short test run that evaluates every 10 steps does not also evaluate at 25 because its task's defaults
    say every 25 steps early on."""
    settings = TrainSettings(steps=30, eval_every=10, early_eval_every=25, early_eval_until=250)
    assert evaluated_steps(settings) == [10, 20]


def test_sorts_defaults_evaluate_every_25_steps_until_step_250():
    config, _ = resolve_run_config("sort", {})
    assert evaluated_steps(config.train) == [*range(25, 251, 25), 500, 750, 1000]


@pytest.mark.parametrize("name", ["early_eval_every", "early_eval_until"])
def test_a_negative_early_schedule_is_one_line(cli, tmp_path, name):
    result = cli(*TINY, "--set", f"{name}=-5", "--out", tmp_path / "run")
    assert_one_line_error(result, f"{name} must not be negative, got -5")


def test_evaluating_early_changes_nothing_the_run_trains(cli, tmp_path):
    """Evaluation draws no random number the training draws: with dropout on (the global generator, step by
    step), a run that evaluates at steps 5, 10 and 20 logs the same losses and ends with the same weights as one
    that evaluates at step 20 alone."""
    common = (*TINY, "--set", "dropout=0.1", "--set", "eval_every=20")
    early = ("--set", "early_eval_every=5", "--set", "early_eval_until=10")
    assert cli(*common, *early, "--out", tmp_path / "early").code == 0
    assert cli(*common, "--out", tmp_path / "plain").code == 0
    records = {name: read_metrics(tmp_path / name) for name in ("early", "plain")}
    evaluated = {name: [r["step"] for r in rs if "heldout_exact_match" in r] for name, rs in records.items()}
    assert evaluated == {"early": [5, 10, 20, 30], "plain": [20, 30]}  # 30: the final evaluation
    losses = {name: [(r["step"], r["loss"]) for r in rs] for name, rs in records.items()}
    assert losses["early"] == losses["plain"]
    weights = {name: load_checkpoint(RunLayout(tmp_path / name).checkpoint, "sort").model for name in records}
    assert weights["early"].keys() == weights["plain"].keys()
    assert all(torch.equal(weights["early"][key], weights["plain"][key]) for key in weights["plain"])
