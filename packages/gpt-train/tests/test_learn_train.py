"""`gpt-train learn train` with every step solved: the seed task trained on the learner's own GPT and kernels sorts
as well as gpt-core's, each evaluation said as it comes, and the two loss curves drawn on one picture. A real sort
run at the task's defaults on the learner's GPT and kernels, beside gpt-core's run at the same defaults (the suite's
default sort run, in the folder where `learn train` keeps it). Its output is docs/learn.md's transcript of `train`
(`learn_transcript`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from learn_transcript import SOLUTIONS, Session, update_page

from gpt_train.cli.learn import learn
from gpt_train.learn.steps import SAMPLING_SOFTMAX_SLOT, STEPS

FOLDER = Path("my-gpt")


def test_learn_train_on_the_learners_gpt_and_kernels_sorts_the_held_out_split(tmp_path, default_sort_run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(default_sort_run, FOLDER / "runs" / "gpt-core")  # as a first `learn train` left it
    for step in STEPS:
        shutil.copy(SOLUTIONS / step.file_name, FOLDER / step.file_name)
        checked = CliRunner().invoke(learn, ["check", step.name])
        assert checked.exit_code == 0, checked.output
    session = Session()
    output = session.run("train")
    assert session.exit_code == 0, output
    lines = output.splitlines()
    assert lines[0] == (
        "training sort on your GPT (model.py) with your kernels: sampling_softmax=softmax, attention=flash_attention, "
        "layer_norm=layer_norm_backward, gelu=gelu, cross_entropy=cross_entropy"
    )
    config = json.loads((FOLDER / "runs" / "mine" / "config.json").read_text())
    assert config["kernels"] == {
        SAMPLING_SOFTMAX_SLOT: "softmax:softmax",
        "attention": "flash_attention:attention",
        "layer_norm": "layer_norm_backward:layer_norm",
        "gelu": "gelu:gelu",
        "cross_entropy": "cross_entropy:cross_entropy",
    }
    records = [json.loads(line) for line in (FOLDER / "runs" / "mine" / "metrics.jsonl").read_text().splitlines()]
    evaluations = [record["step"] for record in records if "heldout_exact_match" in record][:-1]  # the final aside
    progress = [line for line in lines if line.startswith("  step ") and "held-out exact match" in line]
    assert [int(line.split()[1].replace(",", "")) for line in progress] == evaluations  # a line at each one
    assert len(evaluations) >= 4
    assert f"gpt-core's GPT and kernels: the finished run in {FOLDER / 'runs' / 'gpt-core'}" in lines  # reused
    figures = {}
    for who in ("mine", "gpt-core"):
        final = json.loads((FOLDER / "runs" / who / "final.json").read_text())
        assert final["heldout_examples"] == 250_050  # the whole held-out split of 6-digit sort
        figures[who] = final["heldout_exact_match"]
    assert figures["mine"] >= 0.9995
    assert f"  your GPT and kernels  {figures['mine']:.5f}" in output
    assert f"  gpt-core's            {figures['gpt-core']:.5f}" in output
    picture = FOLDER / "runs" / "compare-loss.png"
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert lines[-1].startswith(f"wrote {picture}: your training loss and gpt-core's, step by step")
    update_page("train", session.render(), Path(__file__).name)
