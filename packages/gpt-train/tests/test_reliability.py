"""What a hostile round of use found: concurrent runs, torn files, a full disk, non-finite values, leftovers."""

from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from train_helpers import TINY, assert_one_line_error, ctrl_c_in_the_final_evaluation, read_metrics

from gpt_train import checkpoint
from gpt_train.checkpoint import load_checkpoint, save_checkpoint
from gpt_train.config import RunConfig
from gpt_train.distributed import Rank
from gpt_train.record import Record
from gpt_train.runs import Run, RunDirError, RunLock
from gpt_train.trainer import Trainer
from gpt_viz import RunLayout


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}


def interrupted_run(cli, run_dir: Path, at: int = 17) -> None:
    """A TINY run stopped (as by Ctrl-C) at step `at`, its checkpoint written at that step."""
    assert cli(*TINY, "--out", run_dir, "--steps", "1").code == 0  # lay out the directory
    config = RunConfig.load(run_dir)
    whole = RunConfig(**{**config.__dict__, "train": type(config.train)(**{**config.train.__dict__, "steps": 30})})
    whole.save(run_dir)
    for name in (RunLayout.CHECKPOINT, RunLayout.METRICS, RunLayout.FINAL):
        (run_dir / name).unlink()
    run = Run(whole, whole.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(), resume=False)
    trainer = Trainer(run, quiet=True)
    trainer.on_step = lambda step: setattr(trainer.stop, "requested", step == at)
    assert trainer.run().reason == "interrupted"


# one run per directory ---------------------------------------------------------------------
def test_resume_of_a_directory_in_use_is_refused(cli, tmp_path):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    before = snapshot(run_dir)
    held = RunLock(run_dir).acquire()  # what a first `--resume` holds while it trains
    try:
        assert_one_line_error(cli("run", "--resume", run_dir), "in use by another gpt-train process")
    finally:
        held.release()
    assert snapshot(run_dir) == before
    assert cli("run", "--resume", run_dir, "--quiet").code == 0  # free again once the first one is done


def test_new_run_into_a_directory_in_use_is_refused(cli, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    held = RunLock(run_dir).acquire()
    try:
        assert_one_line_error(cli(*TINY, "--out", run_dir, "--force"), "in use by another gpt-train process")
    finally:
        held.release()
    assert list(run_dir.iterdir()) == []


def test_runs_started_in_the_same_second_without_out_each_get_their_own_directory(cli, tmp_path, monkeypatch):
    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 12, 6, 12, 7, 10)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gpt_train.runs.datetime", Frozen)
    for _ in range(3):
        result = cli(*TINY)
        assert result.code == 0, result.err
    names = sorted(path.name for path in (tmp_path / "runs").iterdir())
    assert names == ["sort-20261206-120710", "sort-20261206-120710-2", "sort-20261206-120710-3"]
    assert all((tmp_path / "runs" / name / RunLayout.FINAL).is_file() for name in names)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="where a directory went is read from /proc (Linux)")
@pytest.mark.parametrize("at", [12, 30])  # 30: the last step, then the final evaluation and attention.npz
def test_a_run_whose_directory_is_moved_away_stops_and_writes_nothing_into_a_new_one_of_its_name(cli, tmp_path, at):
    """The lock holds the directory, not its name: a run moved away (and another made under its name) must not
    go on writing by name into the other."""
    run_dir, moved = tmp_path / "run", tmp_path / "moved"
    assert cli(*TINY, "--out", run_dir).code == 0  # lay out the directory, then train it afresh
    for name in (RunLayout.CHECKPOINT, RunLayout.METRICS, RunLayout.FINAL):
        (run_dir / name).unlink()
    config = RunConfig.load(run_dir)
    lock = RunLock(run_dir).acquire()
    run = Run(config, config.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(), resume=False, lock=lock)

    def move(step: int) -> None:
        if step == at:
            run_dir.rename(moved)
            run_dir.mkdir()  # another run's directory, under the old name

    trainer = Trainer(run, quiet=True, on_step=move)
    try:
        with pytest.raises(RunDirError, match=f"was moved to {moved} while the run trained.*--resume with that path"):
            trainer.run()
    finally:
        lock.release()
    assert list(run_dir.iterdir()) == []
    assert [r["step"] for r in read_metrics(moved)] == list(range(5, min(at, 29), 5))


# torn and leftover files -----------------------------------------------------------------
def test_resume_drops_a_torn_last_metrics_line_and_says_so(cli, tmp_path):
    whole, torn = tmp_path / "whole", tmp_path / "torn"
    assert cli(*TINY, "--out", whole).code == 0
    interrupted_run(cli, torn)
    with open(torn / RunLayout.METRICS, "a") as handle:
        handle.write('{"step": 18, "elapsed": 0.4, "lo')  # a kill in the middle of a write
    result = cli("run", "--resume", torn, "--quiet")
    assert result.code == 0, result.err
    assert "gpt-train: warning: dropped the incomplete last line" in result.err
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(torn)) == strip(read_metrics(whole))


def test_a_damaged_metrics_line_before_the_last_is_an_error(cli, tmp_path):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    lines = (run_dir / RunLayout.METRICS).read_text().splitlines()
    lines[0] = lines[0][:10]
    (run_dir / RunLayout.METRICS).write_text("\n".join(lines) + "\n")
    before = snapshot(run_dir)
    assert_one_line_error(cli("run", "--resume", run_dir), "line 1 is not valid JSON")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("line", ["[1, 2]", '{"step": "5", "loss": 1.0}', '{"step": true}', '"a string"'])
def test_a_metrics_line_that_is_json_but_not_a_record_is_an_error(cli, tmp_path, line):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    lines = (run_dir / RunLayout.METRICS).read_text().splitlines()
    (run_dir / RunLayout.METRICS).write_text("\n".join([lines[0], line, *lines[1:]]) + "\n")
    before = snapshot(run_dir)
    assert_one_line_error(cli("run", "--resume", run_dir), "line 2 is not a metrics record")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("name", [RunLayout.CHECKPOINT, RunLayout.FINAL, RunLayout.CONFIG])
def test_a_half_written_file_left_by_a_kill_is_removed_at_the_next_start(cli, tmp_path, name):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    leftover = run_dir / f".{name}.tmp-99999"
    leftover.write_bytes(b"half a file")
    assert cli("run", "--resume", run_dir, "--quiet").code == 0
    assert not leftover.exists()
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("start", ["--resume", "--force"])
def test_safetensors_own_temporaries_left_by_a_kill_are_removed_at_the_next_start(cli, tmp_path, start):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    (run_dir / RunLayout.SNAPSHOTS).mkdir(exist_ok=True)
    leftovers = [run_dir / ".tmpiLLAtK", run_dir / RunLayout.SNAPSHOTS / ".tmp3xQ9z0"]  # safetensors' own names
    for leftover in leftovers:
        leftover.write_bytes(b"half a checkpoint")
    mine = run_dir / ".tmpnotes"  # not a name safetensors gives: the user's, kept
    mine.write_text("my notes")
    again = ["run", "--resume", run_dir] if start == "--resume" else [*TINY, "--force", "--out", run_dir]
    assert cli(*again, "--quiet").code == 0
    assert [leftover for leftover in leftovers if leftover.exists()] == []
    assert mine.read_text() == "my notes"


@pytest.mark.parametrize("config", ['{"my": "own settings"}\n', None])
def test_an_out_directory_holding_files_of_another_kind_is_refused_and_left_alone_even_with_force(
    cli, tmp_path, config
):
    """A project's own config.json and curves.png were "a run": --resume then refused it, and --force, the other
    way the message offered, deleted them."""
    project = tmp_path / "project"
    project.mkdir()
    if config is not None:
        (project / RunLayout.CONFIG).write_text(config)
    (project / RunLayout.CURVES_PICTURE).write_bytes(b"my own picture")
    before = snapshot(project)
    why = "is not a run configuration: it has no task, model, train" if config else "no config.json"
    for force in ((), ("--force",)):
        result = cli(*TINY, *force, "--out", project)
        assert_one_line_error(result, f"and they are not a run's ({project / 'config.json'}" if config else "", why)
        assert "move them, or train into another directory (--force replaces only a run)" in result.err
        assert snapshot(project) == before


def test_force_replaces_a_run_whose_config_another_version_wrote(cli, tmp_path):
    """A setting this version does not know makes config.json fail to load; the folder is still a run's."""
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    config = json.loads((run_dir / RunLayout.CONFIG).read_text())
    config["train"]["a_setting_of_another_version"] = 1
    (run_dir / RunLayout.CONFIG).write_text(json.dumps(config))
    assert_one_line_error(cli(*TINY, "--out", run_dir), "already holds a finished run", "--force")
    assert cli(*TINY, "--force", "--out", run_dir).code == 0


def test_a_checkpoint_that_cannot_be_written_after_a_failed_evaluation_leaves_the_evaluations_error_first(
    cli, tmp_path, monkeypatch
):
    def failing(self, limit):
        raise RuntimeError("the task cannot score this split")

    def unwritable(self, elapsed):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trainer, "evaluate", failing)
    monkeypatch.setattr(Trainer, "save", unwritable)
    with pytest.raises(RuntimeError, match="^the task cannot score this split") as raised:
        cli(*TINY, "--out", tmp_path / "run")
    assert str(raised.value) == "the task cannot score this split"
    assert raised.value.__notes__ == [
        "and the checkpoint could not be written: OSError: [Errno 28] No space left on device"
    ]


def test_a_stopped_run_of_another_configuration_is_not_reused_without_force(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    (run_dir / RunLayout.CHECKPOINT).unlink()
    (run_dir / RunLayout.FINAL).unlink()
    before = snapshot(run_dir)
    assert_one_line_error(cli(*TINY, "--seed", "7", "--out", run_dir), "already holds a run")
    assert snapshot(run_dir) == before


def test_a_run_killed_before_its_first_checkpoint_can_be_rerun_or_resumed(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    for name in (RunLayout.CHECKPOINT, RunLayout.FINAL, RunLayout.ATTENTION):
        (run_dir / name).unlink()
    (run_dir / RunLayout.METRICS).write_text('{"step": 5, "elapsed": 0.1, "loss": 2.0, "lr": 0.001}\n')
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert "stopped before its first checkpoint; starting it again from step 0" in result.err
    assert [r["step"] for r in read_metrics(run_dir)] == [5, 10, 15, 20, 25, 30]
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == 30

    (run_dir / RunLayout.CHECKPOINT).unlink()
    (run_dir / RunLayout.FINAL).unlink()
    assert cli(*TINY, "--out", run_dir).code == 0  # the same command again, no --force needed


def test_a_run_killed_during_its_final_evaluation_resumes_and_finishes_as_the_uninterrupted_run(
    cli, tmp_path, monkeypatch
):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert cli(*TINY, "--set", "checkpoint_every=10", "--out", whole).code == 0

    def killed(self, elapsed):
        raise SystemExit(137)  # as kill -9 leaves it: whatever was written before the final evaluation

    with monkeypatch.context() as patch:
        patch.setattr("gpt_train.trainer.Trainer._finish", killed)
        cli(*TINY, "--set", "checkpoint_every=10", "--out", cut)
    assert not (cut / RunLayout.FINAL).exists()
    assert load_checkpoint(cut / RunLayout.CHECKPOINT, "sort").step < 30  # the last step's checkpoint comes last
    result = cli("run", "--resume", cut, "--quiet")
    assert result.code == 0, result.err
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(cut)) == strip(read_metrics(whole))


def test_ctrl_c_during_the_final_evaluation_keeps_every_step_and_resuming_only_evaluates(cli, tmp_path, monkeypatch):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert cli(*TINY, "--set", "checkpoint_every=10", "--out", whole).code == 0
    with ctrl_c_in_the_final_evaluation(monkeypatch):
        stopped = cli(*TINY, "--set", "checkpoint_every=10", "--out", cut)
    assert_one_line_error(stopped, "interrupted at step 30", "final evaluation", f"run --resume {cut}", code=130)
    assert load_checkpoint(cut / RunLayout.CHECKPOINT, "sort").step == 30  # no step is trained again
    steps = []
    monkeypatch.setattr(Trainer, "train_step", lambda self, step: steps.append(step))
    result = cli("run", "--resume", cut, "--quiet")
    assert result.code == 0, result.err
    assert steps == []
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(cut)) == strip(read_metrics(whole))
    assert_one_line_error(cli("run", "--resume", cut), "already finished (30 of 30 steps)")


@pytest.mark.parametrize("at", ["final", "step 25"])
def test_an_evaluation_that_raises_keeps_every_step_trained_and_resuming_goes_on_from_them(
    cli, tmp_path, monkeypatch, at
):
    """A task's evaluation that fails (its own error, memory on the whole split): the steps since the last checkpoint
    (checkpoint_every 20 here) are written before the error goes on, and --resume trains none of them again."""
    evaluate = Trainer.evaluate

    def failing(self, limit):
        if self.step == (30 if at == "final" else 25):
            raise RuntimeError("the task cannot score this split")
        return evaluate(self, limit)

    run_dir, settings = tmp_path / "run", ("--set", "checkpoint_every=20", "--set", "eval_every=5")
    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "evaluate", failing)
        with pytest.raises(RuntimeError, match="^the task cannot score this split$"):  # its traceback, as ours
            cli(*TINY, *settings, "--out", run_dir)
    saved = 30 if at == "final" else 25
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == saved  # not 20
    steps = []
    train_step = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step", lambda self, step: steps.append(step) or train_step(self, step))
    assert cli("run", "--resume", run_dir, "--quiet").code == 0
    assert steps == list(range(saved, 30))
    assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 30


def test_sigterm_during_the_final_evaluation_writes_the_checkpoint_as_ctrl_c_does(cli, tmp_path, monkeypatch):
    """SIGTERM's default there killed the process: every step since the last checkpoint was lost, in silence."""
    evaluate = Trainer.evaluate

    def terminated(self, limit):
        if self.step == self.last_step:
            signal.raise_signal(signal.SIGTERM)
        return evaluate(self, limit)

    def killed(signum, frame):  # what the default would do, without taking the test's process with it
        raise SystemExit("killed by SIGTERM")

    monkeypatch.setattr(Trainer, "evaluate", terminated)
    previous = signal.signal(signal.SIGTERM, killed)
    try:
        stopped = cli(*TINY, "--set", "checkpoint_every=100", "--out", tmp_path / "run")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert_one_line_error(stopped, "interrupted at step 30", "final evaluation", code=130)
    assert load_checkpoint(tmp_path / "run" / RunLayout.CHECKPOINT, "sort").step == 30


@pytest.mark.parametrize("command", [("eval",), ("inspect", "heads")])
def test_sigterm_to_a_command_reading_a_run_is_aborted_as_ctrl_c_is_and_leaves_no_temporary(
    cli, tiny_run, monkeypatch, command
):
    """SIGTERM's default killed eval or inspect in silence (exit 143), leaving the file it wrote half-done."""

    def terminated(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)

    def killed(signum, frame):  # what the default would do, without taking the test's process with it
        raise SystemExit("killed by SIGTERM")

    monkeypatch.setattr("gpt_train.cli.trained.checked_metrics", terminated)  # eval, as it scores
    monkeypatch.setattr(os, "fsync", terminated)  # inspect, as it writes its record
    before = sorted(path.name for path in tiny_run.iterdir())
    previous = signal.signal(signal.SIGTERM, killed)
    try:
        result = cli(command[0], tiny_run, *command[1:], "--device", "cpu")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (result.code, result.err.split("\r")[-1].strip()) == (130, "gpt-train: aborted")  # after eval's bar
    assert "Traceback" not in result.err and sorted(path.name for path in tiny_run.iterdir()) == before


def test_a_longer_run_stopped_in_its_final_evaluation_resumes_beside_the_shorter_runs_final_json(
    cli, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    config = json.loads((run_dir / "config.json").read_text())
    config["train"]["steps"] = 40  # more to train, as the tampered-checkpoint tests do
    (run_dir / "config.json").write_text(json.dumps(config))
    with ctrl_c_in_the_final_evaluation(monkeypatch):  # its last step is 40 now
        assert cli("run", "--resume", run_dir, "--quiet").code == 130
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 40


def test_a_finished_run_whose_final_json_is_gone_evaluates_again_keeping_its_rows_and_snapshots_once(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--set", "snapshot_every=10", "--out", run_dir).code == 0
    before, snapshots = read_metrics(run_dir), RunLayout(run_dir).snapshots()
    assert list(snapshots) == [0, 10, 20, 30]
    (run_dir / RunLayout.FINAL).unlink()
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(run_dir)) == strip(before)
    assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 30
    assert RunLayout(run_dir).snapshots() == snapshots  # the last step's kept


def test_a_finished_run_has_its_attention_file_before_its_final_json(cli, tmp_path, monkeypatch):
    """final.json marks a run finished, and a finished run is never resumed: a kill between the two lost it."""
    seen = []
    finish = Record.finish
    monkeypatch.setattr(
        Record, "finish", lambda self, final: seen.append(self.layout.attention.exists()) or finish(self, final)
    )
    assert cli(*TINY, "--out", tmp_path / "run").code == 0
    assert seen == [True]


def test_ctrl_c_while_the_pictures_are_drawn_leaves_a_finished_run_and_says_how_to_draw_them(
    cli, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    monkeypatch.setattr("gpt_train.pictures.draw_attention_picture", lambda layout: exit_by_ctrl_c())
    result = cli(*[a for a in TINY if a != "--no-pictures"], "--out", run_dir)
    assert result.code == 0, result.err
    assert f"pictures not drawn (Ctrl-C; draw them with `gpt-viz curves {run_dir}` and `gpt-viz attention" in result.err
    assert (run_dir / RunLayout.FINAL).exists() and (run_dir / RunLayout.ATTENTION).exists()


def test_ctrl_c_while_the_attention_arrays_are_written_leaves_a_run_resume_finishes(cli, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr("gpt_train.trainer.write_attention", lambda *args: exit_by_ctrl_c())
        stopped = cli(*TINY, "--out", run_dir)
    assert_one_line_error(stopped, "interrupted at step 30", f"Resume with: gpt-train run --resume {run_dir}", code=130)
    assert not (run_dir / RunLayout.FINAL).exists()
    assert cli("run", "--resume", run_dir, "--quiet").code == 0
    assert (run_dir / RunLayout.ATTENTION).exists() and (run_dir / RunLayout.FINAL).exists()


def exit_by_ctrl_c():
    raise KeyboardInterrupt


def test_resuming_with_another_number_of_processes_says_what_changes(cli, tmp_path):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    assert state.world_size == 1
    save_checkpoint(run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, world_size=2))  # as torchrun's 2 wrote
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert "written by a run of 2 process(es), this one has 1" in result.err
    assert "the batches differ from the uninterrupted run's" in result.err


def test_resuming_on_a_cpu_with_another_number_of_threads_says_the_numbers_drift(cli, tmp_path):
    """Same seed, flags, CPU model and threads give the same numbers: a resume with other threads drifted in silence."""
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    assert state.threads == torch.get_num_threads()
    save_checkpoint(run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, threads=state.threads + 1))
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert f"written with {state.threads + 1} CPU thread(s), this process has {state.threads}" in result.err
    assert f"OMP_NUM_THREADS={state.threads + 1} matches it" in result.err


def test_a_checkpoint_keeps_an_mps_generator_state_and_a_cpu_resume_reads_past_it(cli, tmp_path):
    """On MPS, dropout and randomized positions draw from the MPS generator: its state goes in the checkpoint
    (rng/mps) for a resume there to draw on as the uninterrupted run would."""
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    mps = torch.arange(16, dtype=torch.uint8)
    save_checkpoint(run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, rng=state.rng | {"mps": mps}))
    assert torch.equal(load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").rng["mps"], mps)
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err


def test_a_trainer_on_mps_saves_and_restores_the_mps_generator(cli, tmp_path, monkeypatch):
    """No MPS here: the trainer is told its device is one, and torch.mps's two calls stand in."""
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    config = RunConfig.load(run_dir)
    run = Run(config, config.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(), resume=True)
    trainer = Trainer(run, quiet=True)
    drawn, restored = torch.arange(16, dtype=torch.uint8), []
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: drawn)
    monkeypatch.setattr(torch.mps, "set_rng_state", restored.append)
    trainer.device = torch.device("mps")
    state = trainer._state(0.0)
    assert torch.equal(state.rng["mps"], drawn)
    trainer._restore(state)
    assert len(restored) == 1 and torch.equal(restored[0], drawn)


def test_a_checkpoint_that_records_no_number_of_processes_is_resumed_without_a_warning(cli, tmp_path):
    """Written before checkpoints recorded it: whether by 1 process or torchrun's N is not known."""
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    save_checkpoint(
        run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, world_size=None, loss=None, threads=None)
    )
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").world_size is None
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert "process(es)" not in result.err and "thread" not in result.err


def test_a_resume_with_only_the_final_evaluation_left_does_not_warn_of_another_number_of_processes(
    cli, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    with ctrl_c_in_the_final_evaluation(monkeypatch):
        assert cli(*TINY, "--out", run_dir).code == 130
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    save_checkpoint(run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, world_size=2))
    result = cli("run", "--resume", run_dir, "--quiet")
    assert result.code == 0, result.err
    assert "process(es)" not in result.err  # no step is left to average another number of sequences
    save_checkpoint(run_dir / RunLayout.CHECKPOINT, dataclasses.replace(state, loss=None))  # as older versions wrote
    (run_dir / RunLayout.FINAL).unlink()
    result = cli("run", "--resume", run_dir)
    assert result.code == 0, result.err
    assert "final loss not recorded" in result.out


def test_every_file_of_a_run_is_readable_as_the_umask_allows(cli, tmp_path):
    """safetensors writes through a temporary file of mode 0600: the checkpoint alone was private."""
    previous = os.umask(0o022)
    try:
        assert cli(*TINY, "--out", tmp_path / "run", "--set", "snapshot_every=10").code == 0
    finally:
        os.umask(previous)
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "run").rglob("*") if path.is_file()}
    assert "checkpoint.safetensors" in modes and set(modes.values()) == {0o644}, modes


def test_resume_rewrites_metrics_whole_so_a_failed_rewrite_keeps_every_line(cli, tmp_path, monkeypatch):
    """Dropping the lines past the checkpoint replaces metrics.jsonl; truncating it in place would leave a reader
    an empty file, and a crash or a full disk would lose the run's metrics."""
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    with open(run_dir / RunLayout.METRICS, "a") as handle:
        handle.write(json.dumps({"step": 18, "elapsed": 0.4, "loss": 2.0}) + "\n")  # logged, then killed
    before = (run_dir / RunLayout.METRICS).read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("gpt_viz.files.os.fsync", no_space)
    assert_one_line_error(cli("run", "--resume", run_dir), "cannot write", "metrics.jsonl", "No space left on device")
    assert (run_dir / RunLayout.METRICS).read_bytes() == before


def test_a_checkpoint_replaced_while_it_is_read_is_read_again_not_called_corrupted(cli, tmp_path, monkeypatch):
    """A run saves its checkpoint while `eval` or `serve` reads it: safetensors opens the path twice, so the read can
    get one file's header and the next one's data. The reader reads the new file, whole."""
    interrupted_run(cli, tmp_path / "early", at=5)
    interrupted_run(cli, tmp_path / "late", at=17)
    path, newer = tmp_path / "early" / RunLayout.CHECKPOINT, tmp_path / "late" / RunLayout.CHECKPOINT
    real, opened = checkpoint.safe_open, []

    def replaced_between_header_and_data(name, framework):
        if not opened:
            opened.append(name)
            os.replace(newer, path)  # the trainer's atomic save, landing inside the read
            raise SafetensorError("Error while deserializing header: incomplete metadata, file not fully covered")
        return real(name, framework)

    monkeypatch.setattr(checkpoint, "safe_open", replaced_between_header_and_data)
    assert load_checkpoint(path, "sort").step == 17


# a full disk -------------------------------------------------------------------------------
def fill_the_disk(monkeypatch) -> None:
    def no_space(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr("gpt_train.checkpoint.save_file", no_space)


def test_a_full_disk_while_writing_the_configuration_is_one_line(cli, tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("gpt_viz.files.os.fsync", no_space)
    result = cli(*TINY, "--out", tmp_path / "run")
    assert_one_line_error(result, "cannot write", "config.json", "No space left on device")
    assert list((tmp_path / "run").iterdir()) == []  # nothing half-made: the same command can run again


def test_a_full_disk_during_a_fresh_run_is_one_line(cli, tmp_path, monkeypatch):
    fill_the_disk(monkeypatch)
    result = cli(*TINY, "--out", tmp_path / "run")
    assert_one_line_error(result, "cannot write checkpoint", "No space left on device", "checkpoint.safetensors")
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]


def test_a_full_disk_during_a_resume_keeps_the_previous_checkpoint(cli, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    interrupted_run(cli, run_dir)
    kept = (run_dir / RunLayout.CHECKPOINT).read_bytes()
    fill_the_disk(monkeypatch)
    result = cli("run", "--resume", run_dir, "--quiet")
    assert_one_line_error(result, "cannot write checkpoint", "No space left on device")
    assert (run_dir / RunLayout.CHECKPOINT).read_bytes() == kept
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == 17


# values that cannot train ----------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "lr=nan"], "lr must be a finite number, got nan"),
        (["--lr", "nan"], "lr must be a finite number, got nan"),
        (["--lr", "inf"], "lr must be a finite number, got inf"),
        (["--weight-decay", "nan"], "weight_decay must be a finite number, got nan"),
        (["--set", "min_lr=nan"], "min_lr must be a finite number, got nan"),
        (["--set", "grad_clip=nan"], "grad_clip must be a finite number, got nan"),
        (["--set", "min_lr=0.5", "--lr", "0.1"], "min_lr (0.5) must not exceed lr (0.1)"),
        (["--set", "dropout=nan"], "dropout must be in [0, 1)"),
    ],
)
def test_non_finite_or_inconsistent_settings_are_refused_before_anything_is_written(cli, tmp_path, args, message):
    assert_one_line_error(cli(*TINY, *args, "--out", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()


def test_a_diverging_run_ends_with_exit_status_1_and_keeps_its_last_checkpoint(cli, tmp_path):
    run_dir = tmp_path / "run"
    result = cli(*TINY, "--lr", "1e30", "--set", "grad_clip=0", "--set", "warmup_steps=0", "--out", run_dir)
    assert_one_line_error(result, "loss became nan", code=1)
    assert not (run_dir / RunLayout.FINAL).exists()


@pytest.mark.parametrize("temperature", ["nan", "inf"])
def test_sample_refuses_a_non_finite_temperature(cli, tiny_run, temperature):
    result = cli("sample", tiny_run, "--prompt", "3141", "--temperature", temperature)
    assert_one_line_error(result, "temperature must be a finite number")


@pytest.mark.parametrize("seed", [str(2**64), "-1"])
def test_sample_and_verify_take_the_seeds_run_takes_and_refuse_others_in_one_line(cli, tiny_run, seed):
    for command in (["sample", tiny_run, "--prompt", "3141"], ["verify"]):
        assert_one_line_error(cli(*command, "--seed", seed), "Invalid value for '--seed'", code=2)


def test_an_empty_out_is_refused_not_taken_for_the_current_directory(cli, tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert_one_line_error(cli(*TINY, "--out", ""), "Invalid value for '--out': is empty; name a path")
    assert list(here.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (("run", "--task", "text", "--data", ""), "Invalid value for '--data': is empty"),
        (("run", "--resume", ""), "Invalid value for '--resume': is empty"),
        (("run", "--task", "sort", "--init-from", ""), "Invalid value for '--init-from': is empty"),
        (("sample", "--hf", "", "--prompt", "x"), "Invalid value for '--hf': is empty"),
        (("eval", ""), "the run named is empty"),
        (("export", "", "out"), "the run named is empty"),
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(cli, tmp_path, monkeypatch, command, named):
    """An unset shell variable: --data "" trained on every .txt under the current directory."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    (here / "notes.txt").write_text("the user's own text " * 200)
    assert_one_line_error(cli(*command), named)
    assert sorted(path.name for path in here.iterdir()) == ["notes.txt"]


def test_an_out_that_is_not_utf8_is_refused_and_a_renamed_run_says_why_it_cannot_be_read(cli, tiny_run, tmp_path):
    latin1 = tmp_path / os.fsdecode(b"sort\xe9")  # typed in a Latin-1 terminal: safetensors cannot open it again
    result = cli(*TINY, "--out", latin1)
    assert_one_line_error(result, "Invalid value for '--out': ", code=2)
    assert "is not UTF-8 text; name it in UTF-8" in result.err and not latin1.exists()
    result = cli("export", tiny_run, latin1)  # an export there could not be read back by --init-from
    assert_one_line_error(result, "Invalid value for 'OUT': ", "is not UTF-8 text")
    assert not latin1.exists()
    shutil.copytree(tiny_run, latin1)  # a run renamed so afterwards: its checkpoint is whole, not "corrupted"
    result = cli("eval", latin1)
    assert_one_line_error(result, "safetensors opens only paths in UTF-8; rename the directory")
    assert "corrupted" not in result.err


def test_data_for_a_task_that_reads_none_is_named_as_such(cli, tmp_path):
    result = cli(*TINY, "--data", tmp_path / "corpus.txt", "--out", tmp_path / "run")
    assert_one_line_error(result, "task 'sort' reads no data file; drop --data")


def test_scores_keep_the_digits_that_separate_7_errors_from_none():
    from gpt_train.cli import format_value, wrong_count

    assert format_value(1 - 7 / 250_050, 250_050) == "0.999972"
    assert format_value(1.0, 250_050) == "1.000000"
    assert wrong_count(1 - 7 / 250_050, 250_050) == 7
    assert wrong_count(1 - 7 / 250_050 + 1e-7, 250_050) is None  # not a whole number of examples
    assert format_value(1 - 1 / (4 * 99_981), 99_981) == "0.999997"  # one digit of 4 x 99,981 wrong: not 1.00000


def test_the_end_of_run_line_says_how_many_held_out_examples_were_wrong(cli, tmp_path):
    from gpt_train.cli import format_value

    result = cli(*[a for a in TINY if a != "--quiet"], "--out", tmp_path / "run")
    assert result.code == 0, result.err
    final = json.loads((tmp_path / "run" / RunLayout.FINAL).read_text())
    n = final["heldout_examples"]
    wrong = round((1 - final["heldout_exact_match"]) * n)
    shown = format_value(final["heldout_exact_match"], n)
    assert f"heldout_exact_match {shown} ({wrong:,} of {n:,.0f} wrong)" in result.out


@pytest.mark.parametrize(
    ("heldout", "said"),
    [
        ([0.01, 0.02, 0.5], ", never at or above 0.99;"),
        ([0.01, 0.995, 1.0], ", at or above 0.99 since step 40;"),
        (
            [0.995, 0.4, 1.0, 1.0],
            ", at or above 0.99 since step 60 (first reached at step 20; fell below it once since);",
        ),
        (
            [0.995, 0.4, 1.0, 0.48],
            ", below 0.99 from step 80 to the end (first reached at step 20; fell below it 2 times since);",
        ),
    ],
)
def test_a_grokking_runs_end_line_says_since_when_held_out_accuracy_stayed_at_099(tmp_path, heldout, said):
    """The slingshot's collapses can come after the jump: a run may end inside one, and its line says so."""
    from gpt_train.cli.run import summary
    from gpt_train.config import resolve_run_config

    config, _ = resolve_run_config("modadd", {"p": 13})
    steps = range(20, 20 * len(heldout) + 1, 20)
    records = [
        {"step": s, "loss": 0.1, "train_accuracy": 1.0, "heldout_accuracy": h}
        for s, h in zip(steps, heldout, strict=True)
    ]
    (tmp_path / RunLayout.METRICS).write_text("".join(json.dumps(record) + "\n" for record in records))
    final = records[-1] | {"elapsed": 1.0, "heldout_examples": 127.0}
    assert said in summary(config, final, tmp_path)


def test_a_run_that_scores_only_held_out_says_nothing_of_its_course(tmp_path):
    from gpt_train.cli.run import held_out_course
    from gpt_train.config import resolve_run_config

    config, _ = resolve_run_config("sort", {"length": 4})
    assert held_out_course(config, tmp_path) == ""


# a run carries what it needs to decode ---------------------------------------------------
SMALL_TEXT = (
    "ROMEO: But soft, what light through yonder window breaks?\nJULIET: O Romeo, Romeo, wherefore art thou?\n"
) * 120


def tiny_text_run(cli, tmp_path: Path) -> tuple[Path, Path]:
    corpus, run_dir = tmp_path / "corpus.txt", tmp_path / "run"
    corpus.write_text(SMALL_TEXT)
    result = cli(
        "run", "--task", "shakespeare", "--data", corpus, "--device", "cpu", "--quiet", "--steps", "4",
        "--set", "block_size=16", "--set", "chunk_size=256", "--set", "n_layer=1", "--set", "n_embd=16",
        "--set", "n_head=2", "--set", "eval_every=2", "--set", "eval_limit=8", "--out", run_dir,
    )  # fmt: skip
    assert result.code == 0, result.err
    return corpus, run_dir


@pytest.mark.parametrize(
    "change",
    [lambda text: text + "XYZ", lambda text: text.replace("ROMEO", "RMOEO", 1)],
    ids=["appended", "two letters swapped"],
)
def test_a_changed_corpus_is_refused_by_eval_in_one_line_and_sample_warns(cli, tmp_path, change):
    corpus, run_dir = tiny_text_run(cli, tmp_path)
    assert cli("eval", run_dir).code == 0
    corpus.write_text(change(SMALL_TEXT))
    before = snapshot(run_dir)
    assert_one_line_error(cli("eval", run_dir), "is not the text this run was trained on")
    sampled = cli("sample", run_dir, "--prompt", "RO")  # with the tokenizer the run recorded, and a warning
    assert sampled.code == 0 and "is not the text this run was trained on" in sampled.err
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_the_dropout_check_gives_back_the_accelerators_generator_it_reseeds(monkeypatch, device):
    """The check seeds every generator (torch.manual_seed); on MPS its state was not given back, so every later mask
    of the run came from seed 0, whatever its seed. Stood in for by spies on the device's generator state."""
    module = torch.get_device_module(device)
    state = {"now": "the run's"}
    monkeypatch.setattr(module, "get_rng_state", lambda device=None: state["now"])
    monkeypatch.setattr(module, "set_rng_state", lambda new, device=None: state.update(now=new))

    def report(*args, **kwargs):
        state["now"] = "seed 0"
        return []

    monkeypatch.setattr("gpt_train.trainer.dropout_report", report)
    trainer = Trainer.__new__(Trainer)  # the check reads the device and the kernels alone
    trainer.device, trainer.model = torch.device(device), type("Model", (), {"kernels": None})()
    assert trainer._dropout_failure() is None
    assert state["now"] == "the run's"
