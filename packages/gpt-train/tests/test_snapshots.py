"""`--set snapshot_every=N`: the weights alone at step 0 and every N steps, kept beside the run to watch a
mechanism form; they change nothing about the training, and a resumed or replaced run keeps them consistent."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from train_helpers import TINY, assert_one_line_error, read_metrics

import gpt_train
from gpt_train.checkpoint import CheckpointError, load_checkpoint
from gpt_train.config import RunConfig
from gpt_train.distributed import Rank
from gpt_train.runs import Run
from gpt_train.trainer import Trainer, initial_model
from gpt_viz import RunLayout

SNAPSHOTS = ("--set", "snapshot_every=10")


def weights_at(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path, "sort").model


def without_clock(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in record.items() if k != "elapsed"} for record in records]


def test_snapshots_hold_the_weights_at_step_0_and_every_n_steps(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, *SNAPSHOTS, "--out", run_dir).code == 0
    snapshots = RunLayout(run_dir).snapshots()
    assert list(snapshots) == [0, 10, 20, 30]
    final = load_checkpoint(RunLayout(run_dir).checkpoint, "sort").model
    assert all(torch.equal(weights_at(snapshots[30])[name], final[name]) for name in final)
    initial = dict(initial_model(RunConfig.load(run_dir)).named_parameters())
    assert all(torch.equal(weights_at(snapshots[0])[name], initial[name]) for name in initial)
    assert not torch.equal(weights_at(snapshots[10])["wte.weight"], initial["wte.weight"])


def test_keeping_snapshots_changes_nothing_a_run_logs(cli, tmp_path):
    assert cli(*TINY, *SNAPSHOTS, "--out", tmp_path / "kept").code == 0
    assert cli(*TINY, "--out", tmp_path / "plain").code == 0
    assert without_clock(read_metrics(tmp_path / "kept")) == without_clock(read_metrics(tmp_path / "plain"))
    assert RunLayout(tmp_path / "plain").snapshots() == {}


def test_load_snapshots_gives_each_steps_model_in_order(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, *SNAPSHOTS, "--out", run_dir).code == 0
    seen = [(step, model.wte.weight.detach().clone()) for step, model in gpt_train.load_snapshots(run_dir)]
    assert [step for step, _ in seen] == [0, 10, 20, 30]
    for step, embedding in seen:
        assert torch.equal(embedding, weights_at(RunLayout(run_dir).snapshot(step))["wte.weight"])


def test_a_snapshot_whose_name_is_not_its_step_is_one_line(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, *SNAPSHOTS, "--out", run_dir).code == 0
    layout = RunLayout(run_dir)
    layout.snapshot(50).write_bytes(layout.checkpoint.read_bytes())  # the step-30 checkpoint, named step 50
    with pytest.raises(CheckpointError, match="holds the weights of step 30, not of step 50"):
        list(gpt_train.load_snapshots(run_dir))


def test_a_resumed_run_writes_again_the_snapshots_past_its_checkpoint(cli, tmp_path):
    """A snapshot past the checkpoint (written before a crash) is of steps the resumed run trains again."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert cli(*TINY, *SNAPSHOTS, "--set", "snapshot_every=5", "--out", whole).code == 0
    assert cli(*TINY, *SNAPSHOTS, "--set", "snapshot_every=5", "--out", split, "--steps", "1").code == 0
    config = RunConfig.load(whole)
    config.save(split)
    for name in (RunLayout.CHECKPOINT, RunLayout.METRICS, RunLayout.FINAL):
        (split / name).unlink()
    trainer = Trainer(Run(config, config.build_task(), RunLayout(split), torch.device("cpu"), Rank(), False), True)
    trainer.on_step = lambda step: setattr(trainer.stop, "requested", step == 17)
    assert trainer.run().reason == "interrupted"
    stale = RunLayout(split).snapshot(25)
    stale.write_bytes(RunLayout(split).snapshot(5).read_bytes())  # as a crashed process could have left it
    assert cli("run", "--resume", split, "--quiet").code == 0
    expected, got = RunLayout(whole).snapshots(), RunLayout(split).snapshots()
    assert list(got) == list(expected) == list(range(0, 31, 5))
    for step in expected:
        assert load_checkpoint(got[step], "sort").step == step
        same, kept = weights_at(got[step]), weights_at(expected[step])
        assert all(torch.equal(same[name], kept[name]) for name in kept)


def test_replacing_a_run_removes_its_snapshots(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, *SNAPSHOTS, "--out", run_dir).code == 0
    assert cli(*TINY, "--out", run_dir, "--force").code == 0
    assert RunLayout(run_dir).snapshots() == {}


def test_a_negative_snapshot_interval_is_one_line(cli, tmp_path):
    result = cli(*TINY, "--set", "snapshot_every=-1", "--out", tmp_path / "run")
    assert_one_line_error(result, "snapshot_every must not be negative, got -1")


def test_a_file_named_snapshots_stops_the_run_in_one_line_before_anything_is_written(cli, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / RunLayout.SNAPSHOTS).write_text("my notes")
    result = cli(*TINY, *SNAPSHOTS, "--out", run_dir)
    assert_one_line_error(result, f"{run_dir / RunLayout.SNAPSHOTS} is a file, where this run keeps its snapshots")
    assert sorted(path.name for path in run_dir.iterdir()) == [RunLayout.SNAPSHOTS]
    assert (run_dir / RunLayout.SNAPSHOTS).read_text() == "my notes"


def test_a_snapshot_that_cannot_be_written_is_a_warning_naming_it_and_the_run_keeps_its_checkpoints(
    cli, tmp_path, monkeypatch
):
    def disk_full_after_the_first_snapshot(tensors, filename, metadata=None):
        if RunLayout.SNAPSHOTS in Path(filename).parts and metadata["step"] != "0":
            raise OSError(errno.ENOSPC, "No space left on device")
        return save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr("gpt_train.checkpoint.save_file", disk_full_after_the_first_snapshot)
    run_dir = tmp_path / "run"
    result = cli(*TINY, *SNAPSHOTS, "--out", run_dir)
    assert result.code == 0, result.err
    snapshot = RunLayout(run_dir).snapshot(10)
    assert result.err.strip().splitlines() == [
        f"gpt-train: warning: cannot write snapshot {snapshot} (No space left on device); the run goes on without "
        "snapshots, keeping those written"
    ]
    assert list(RunLayout(run_dir).snapshots()) == [0]
    assert load_checkpoint(RunLayout(run_dir).checkpoint, "sort").step == 30
    assert RunLayout(run_dir).final.exists()
