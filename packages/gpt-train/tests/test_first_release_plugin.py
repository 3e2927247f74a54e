"""A task plugin written against the first release's contract (fixtures/first-release-task, unchanged since)
still installs, is listed with its distribution, and trains with the defaults it gave: its TrainDefaults is
read as the Defaults it stands for, its marker from gpt_tasks is the one marker, and its own evaluation
unpacks the model's output as nanoGPT does, `logits, _ = model(x)`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from gpt_tasks import registry
from gpt_viz import RunLayout

FIXTURE = Path(__file__).parent / "fixtures" / "first-release-task"
DISTRIBUTION, VERSION = "gpt-task-cycle", "0.1.0"  # as its pyproject.toml says


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The fixture installed as pip installs a distribution: its code and a dist-info (metadata and entry
    points, from its pyproject.toml) on sys.path, found by the task registry like any other."""
    dist_info = tmp_path / f"{DISTRIBUTION.replace('-', '_')}-{VERSION}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {VERSION}\n")
    (dist_info / "entry_points.txt").write_text("[gpt_tasks]\ncycle = gpt_task_cycle\n")
    monkeypatch.syspath_prepend(str(FIXTURE / "src"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gpt_task_cycle", raising=False)
    registry.default_registry.cache_clear()
    yield
    registry.default_registry.cache_clear()


def test_gpt_train_tasks_lists_the_first_release_plugin(cli, installed):
    listed = json.loads(cli("tasks", "--json").out)
    cycle = [row for row in listed if row["name"] == "cycle"]
    assert [(row["plugin"], row["distribution"], row["version"]) for row in cycle] == [("cycle", DISTRIBUTION, VERSION)]
    assert {"sort", "addition"} <= {row["name"] for row in listed}  # the others keep working


def test_the_first_release_plugin_trains_with_the_defaults_it_gave(cli, installed, tmp_path):
    run_dir = tmp_path / "cycle"
    result = cli("run", "--task", "cycle", "--device", "cpu", "--quiet", "--out", run_dir)
    assert result.code == 0, result.err
    config = json.loads((run_dir / RunLayout.CONFIG).read_text())
    model, train = config["model"], config["train"]
    assert (model["n_layer"], model["n_head"], model["n_embd"], model["pos"]) == (1, 2, 32, "learned")
    assert (model["vocab_size"], model["block_size"]) == (10, 7)  # the task's own
    assert (train["steps"], train["batch_size"], train["lr"], train["min_lr"]) == (60, 32, 3e-3, 3e-4)
    assert (train["beta1"], train["beta2"], train["eval_every"], train["eval_limit"]) == (0.9, 0.95, 20, 50)
    final = json.loads((run_dir / "final.json").read_text())
    assert final["step"] == 60 and final["loss"] < math.log(10)  # its 60 steps, and it learned past chance
    assert final["heldout_examples"] == registry.get_task("cycle").split.count("heldout")  # the whole split
    assert 0.0 <= final["heldout_exact_match"] <= final["heldout_token_accuracy"] <= 1.0
