"""`gpt-train learn train` with every step solved: the seed task trained on the learner's kernels sorts as well
as gpt-core's own. A real sort run at the task's defaults with the learner's kernels, beside gpt-core's run at the
same defaults (the suite's default sort run, in the folder where `learn train` keeps it)."""

from __future__ import annotations

import json
import shutil
from importlib.resources import files
from pathlib import Path

from click.testing import CliRunner

from gpt_train.cli.learn import learn
from gpt_train.learn.steps import SAMPLING_SOFTMAX_SLOT, STEPS

SOLUTIONS = Path(str(files("gpt_train.learn.solutions")))


def test_learn_train_with_every_solution_sorts_the_held_out_split(tmp_path, default_sort_run):
    shutil.copytree(default_sort_run, tmp_path / "runs" / "gpt-core")  # as a first `learn train` left it
    for step in STEPS:
        shutil.copy(SOLUTIONS / step.file_name, tmp_path / step.file_name)
        checked = CliRunner().invoke(learn, ["check", step.name, "--dir", str(tmp_path)])
        assert checked.exit_code == 0, checked.output
    result = CliRunner().invoke(learn, ["train", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"gpt-core's kernels: the finished run in {tmp_path / 'runs' / 'gpt-core'}" in result.output  # reused
    config = json.loads((tmp_path / "runs" / "mine" / "config.json").read_text())
    assert config["kernels"] == {
        SAMPLING_SOFTMAX_SLOT: "softmax:softmax",
        "attention": "flash_attention:attention",
        "layer_norm": "layer_norm_backward:layer_norm",
        "gelu": "gelu:gelu",
        "cross_entropy": "cross_entropy:cross_entropy",
    }
    figures = {}
    for who in ("mine", "gpt-core"):
        final = json.loads((tmp_path / "runs" / who / "final.json").read_text())
        assert final["heldout_examples"] == 250_050  # the whole held-out split of 6-digit sort
        figures[who] = final["heldout_exact_match"]
    assert figures["mine"] >= 0.9995
    assert f"your kernels        {figures['mine']:.5f}" in result.output
    assert f"gpt-core's kernels  {figures['gpt-core']:.5f}" in result.output
