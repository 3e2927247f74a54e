"""The final evaluation's progress: a bar per split on stderr while an evaluation walks its examples, and
nothing at all when quiet."""

from __future__ import annotations

from pathlib import Path

import torch

from gpt_core import GPT
from gpt_tasks import get_task
from gpt_train.cli.formatting import format_metrics
from gpt_train.cli.run import summary
from gpt_train.config import resolve_run_config
from gpt_train.progress import Progress, evaluation_progress, format_loss


def _evaluate_modadd() -> None:
    task = get_task("modadd", p=23)
    torch.manual_seed(0)
    task.evaluate(GPT(task.model_config(n_layer=1, n_head=2, n_embd=16)), "heldout", "cpu")


def test_an_evaluation_within_evaluation_progress_shows_a_bar_on_stderr(capsys):
    with evaluation_progress(quiet=False):
        _evaluate_modadd()
    captured = capsys.readouterr()
    assert "evaluating heldout" in captured.err and "/432" in captured.err  # the held-out 80% of the 23 * 23 pairs
    assert captured.out == ""


def test_quiet_shows_nothing(capsys):
    with evaluation_progress(quiet=True):
        _evaluate_modadd()
    _evaluate_modadd()  # and outside the block no evaluation reports anything
    assert capsys.readouterr() == ("", "")


def test_the_progress_bar_shows_a_small_loss_in_significant_digits_not_as_zero(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    config, _ = resolve_run_config("sort", {})
    progress = Progress(config, 0, quiet=False)
    progress.update(4.5e-05, {config.primary_metric: 0.5})
    assert progress.bar.postfix == f"loss=4.5e-05, {config.primary_metric}=0.5000"
    progress.close()


def test_a_loss_prints_four_decimals_and_a_tiny_one_its_significant_digits():
    assert [format_loss(value) for value in (2.83221, 0.0547, 0.001, 0.00099996, 4.5e-05, 0.0, float("nan"))] == [
        "2.8322", "0.0547", "0.0010", "0.0010", "4.5e-05", "0", "nan",
    ]  # fmt: skip
    shown = format_metrics({"heldout_loss": 3.2e-05, "heldout_examples": 192, "heldout_exact_match": 0.5})
    assert shown == "heldout_loss 3.2e-05, heldout_examples 192, heldout_exact_match 0.5000"  # eval's line


def test_the_summary_gives_a_tiny_held_out_loss_its_digits(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick brown fox\n" for i in range(3000)))
    config, _ = resolve_run_config("shakespeare", {"data": str(corpus)})
    final = {"step": 30, "elapsed": 1.0, "loss": 4.5e-05, config.primary_metric: 3.2e-05}
    line = summary(config, final, Path("runs/x"))
    assert f"{config.primary_metric} 3.2e-05" in line and "final loss 4.5e-05" in line
