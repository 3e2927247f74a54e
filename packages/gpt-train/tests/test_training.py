"""The training loop: schedule, decay groups, reproducibility, resume, Ctrl-C, divergence, torchrun."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from train_helpers import TINY, assert_one_line_error, read_metrics

import gpt_core.kernels
from gpt_core import GPT, KERNEL_SETS, GPTConfig
from gpt_tasks import Batch, field_types, get_task, list_tasks
from gpt_train.checkpoint import load_checkpoint
from gpt_train.cli.run import resume_hint
from gpt_train.config import ConfigError, RunConfig, train_settings
from gpt_train.distributed import DistributedError, Rank, Unread, lost_a_rank
from gpt_train.precision import Precision
from gpt_train.progress import Progress
from gpt_train.runs import Run, RunLock
from gpt_train.settings import TrainSettings
from gpt_train.signals import REPEAT_GRACE
from gpt_train.trainer import (
    BatchError,
    MetricsError,
    Trainer,
    checked_batch,
    checked_metrics,
    learning_rate,
    make_optimizer,
)
from gpt_viz import RunLayout

SETTINGS = dict(steps=100, batch_size=8, lr=1e-3, min_lr=1e-4, warmup_steps=10, schedule="cosine",
                weight_decay=0.1, beta1=0.9, beta2=0.99, grad_clip=1.0, eval_every=50, eval_limit=10)  # fmt: skip


def test_learning_rate_warms_up_then_decays_to_min_lr():
    s = TrainSettings(**SETTINGS)
    assert learning_rate(0, s) == pytest.approx(1e-4)
    assert learning_rate(9, s) == pytest.approx(1e-3)
    assert learning_rate(10, s) == pytest.approx(1e-3)
    assert learning_rate(55, s) == pytest.approx(5.5e-4)
    assert learning_rate(100, s) == pytest.approx(1e-4)
    assert all(learning_rate(i, s) >= learning_rate(i + 1, s) for i in range(10, 100))


def test_constant_schedule_stays_at_lr_after_warmup():
    s = TrainSettings(**SETTINGS | {"schedule": "constant"})
    assert learning_rate(99, s) == learning_rate(10, s) == 1e-3


def test_a_cool_down_holds_lr_then_falls_linearly_towards_min_lr_over_the_last_steps():
    s = TrainSettings(**SETTINGS | {"schedule": "constant", "cooldown_steps": 30})
    assert learning_rate(69, s) == 1e-3  # the constant part ends at steps - cooldown_steps
    assert learning_rate(70, s) == pytest.approx(1e-3)
    assert learning_rate(85, s) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 15 / 30)
    assert learning_rate(99, s) == pytest.approx(1e-4 + (1e-3 - 1e-4) / 30)  # one step short of min_lr
    assert all(learning_rate(i, s) > learning_rate(i + 1, s) for i in range(70, 99))


def test_a_run_shorter_than_its_cool_down_cools_from_the_end_of_the_warm_up():
    s = TrainSettings(**SETTINGS | {"schedule": "constant", "cooldown_steps": 600})
    assert learning_rate(9, s) == pytest.approx(1e-3)  # the warm-up's last step
    assert learning_rate(10, s) == pytest.approx(1e-3)
    assert learning_rate(55, s) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 45 / 90)


def test_a_reached_trigger_drops_lr_to_min_lr_at_once_and_ends_the_run_a_cool_down_later():
    s = TrainSettings(**SETTINGS | {"schedule": "constant", "cooldown_steps": 30, "cooldown_trigger": 0.99})
    assert s.last_step() == 100 and learning_rate(85, s) == pytest.approx(1e-3 + (1e-4 - 1e-3) * 15 / 30)
    assert s.last_step(triggered=40) == 70
    assert learning_rate(39, s, triggered=40) == 1e-3 and learning_rate(40, s, triggered=40) == 1e-4
    assert learning_rate(69, s, triggered=40) == 1e-4
    assert s.last_step(triggered=80) == 100  # reached too late for a whole cool-down: the run still ends at steps
    off = TrainSettings(**SETTINGS | {"schedule": "constant", "cooldown_trigger": 0.99})  # no cooldown_steps: none
    assert off.last_step(triggered=40) == 100 and learning_rate(99, off, triggered=40) == 1e-3


def test_a_trigger_reached_inside_the_warm_up_drops_lr_to_min_lr_at_once():
    """The warm-up's rising rate came first: lr climbed through the whole cool-down."""
    s = TrainSettings(**SETTINGS | {"schedule": "constant", "warmup_steps": 50, "cooldown_steps": 7,
                                    "cooldown_trigger": 0.5})  # fmt: skip
    assert learning_rate(9, s, triggered=10) == pytest.approx(1e-3 * 10 / 50)
    assert [learning_rate(step, s, triggered=10) for step in range(10, 17)] == [1e-4] * 7


def test_a_cooldown_trigger_given_without_a_cool_down_is_refused(cli, tmp_path):
    """It was ignored without a word: the run never dropped its rate nor ended early."""
    result = cli(*TINY, "--set", "cooldown_trigger=0.5", "--out", tmp_path / "r")
    assert_one_line_error(result, "cooldown_trigger starts a cool-down of cooldown_steps steps")


@pytest.mark.parametrize(
    ("change", "message"),
    [({"schedule": "cosine"}, "applies to the constant schedule"), ({"cooldown_steps": -1}, "must not be negative"),
     ({"cooldown_trigger": -0.5}, "must not be negative")],
)  # fmt: skip
def test_a_cool_down_that_cannot_apply_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        TrainSettings(**SETTINGS | {"schedule": "constant", "cooldown_steps": 30} | change)


def test_every_builtin_tasks_training_overrides_resolve_to_a_run_that_warms_up_then_decays(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(random.Random(0).choices("abcdefgh ", k=20_000)), encoding="utf-8")
    text = {"data": str(corpus), "chunk_size": 64, "block_size": 8}
    for info in list_tasks():
        if info.plugin == "builtin":
            task = get_task(info.name, **(text if "data" in field_types(info.task_class.Params) else {}))
            s = train_settings(info.name, task.defaults().train)
            assert s.min_lr > 0 and s.warmup_steps < s.steps, info.name


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"stpes": 400}, "unknown training setting 'stpes'; known: batch_size, beta1"),
        ({"lr": -1}, "lr must be positive"),
    ],
)
def test_a_task_override_trainsettings_refuses_is_one_line_naming_the_task(overrides, reason):
    with pytest.raises(ConfigError, match=rf"^task 'reverse', in its defaults\(\)\.train: {reason}"):
        train_settings("reverse", overrides)


def test_weight_decay_only_on_matrices_not_norms_biases_or_positions():
    model = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, n_embd=16))
    decay, no_decay = make_optimizer(model, TrainSettings(**SETTINGS)).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert "wte.weight" in decayed and "blocks.0.attn.qkv.weight" in decayed
    assert "wpe.weight" not in decayed
    assert not [n for n in decayed if n.endswith(".bias") or ".ln" in n]


# Randomized positions draw from the global RNG in every training forward, and mixed lengths draw each
# batch's length: both must leave seeded runs and resumes bit-identical.
RANDOMIZED = ["--set", "pos=learned", "--set", "randomized_positions=true", "--set", "max_positions=24",
              "--set", "separator=true", "--set", "min_length=2"]  # fmt: skip


@pytest.mark.parametrize("extra", [[], RANDOMIZED], ids=["plain", "randomized"])
def test_same_seed_and_flags_give_bit_identical_metrics(cli, tmp_path, extra):
    for name in ("a", "b"):
        assert cli(*TINY, *extra, "--out", tmp_path / name).code == 0
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(tmp_path / "a")) == strip(read_metrics(tmp_path / "b"))


def test_different_seeds_give_different_runs(cli, tmp_path):
    assert cli(*TINY, "--out", tmp_path / "a").code == 0
    assert cli(*TINY, "--out", tmp_path / "b", "--seed", "2").code == 0
    assert read_metrics(tmp_path / "a")[0]["loss"] != read_metrics(tmp_path / "b")[0]["loss"]


def tensors_of(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").model


def trainer_for(config: RunConfig, run_dir: Path) -> Trainer:
    run = Run(config, config.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(), resume=False)
    return Trainer(run, quiet=True)


def interrupt_at(trainer: Trainer, step: int):
    def hook(current: int) -> None:
        if current == step:
            trainer.stop.requested = True  # exactly what the SIGINT handler does

    return hook


GROKFAST = ["--set", "grokfast_lambda=2", "--set", "grokfast_alpha=0.9"]
# 20 steps at min_lr from the first evaluation whose held-out exact match reaches 0.05 (step 20 of this run).
TRIGGERED = ["--steps", "200", "--lr", "1e-2", "--set", "warmup_steps=5", "--set", "schedule=constant",
             "--set", "cooldown_steps=20", "--set", "cooldown_trigger=0.05"]  # fmt: skip


def test_a_run_with_a_cool_down_trigger_ends_its_cool_down_after_the_first_evaluation_that_reached_it(cli, tmp_path):
    assert cli(*TINY, *TRIGGERED, "--out", tmp_path).code == 0
    records = read_metrics(tmp_path)
    evaluations = [r for r in records if "heldout_exact_match" in r]
    reached = next(r["step"] for r in evaluations if r["heldout_exact_match"] >= 0.05)
    assert 5 < reached < 180  # the trigger fired, early enough to end the run before `steps`
    assert all(r["heldout_exact_match"] >= 0.05 for r in evaluations if r["step"] >= reached)  # nothing reset it
    assert records[-1]["step"] == reached + 20
    assert all(r["lr"] == 1e-2 for r in records if 5 <= r["step"] <= reached)  # the full lr up to it
    assert all(r["lr"] == 1e-4 for r in records if r["step"] > reached)  # then min_lr


def test_an_evaluation_below_the_trigger_stops_the_cool_down_until_the_trigger_is_reached_again(cli, tmp_path):
    """A collapse during the cool-down would otherwise be frozen by the low learning rate: the run goes back to
    the full rate, and ends only after a whole cool-down at or above the trigger."""
    assert cli(*TINY, *TRIGGERED, "--out", tmp_path, "--steps", "1").code == 0
    config = RunConfig.load(tmp_path)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=200))
    trainer, key = trainer_for(config, tmp_path), config.primary_metric
    progress = Progress(config, 0, quiet=True)
    for step, metric, expected in [(40, 0.01, None), (60, 0.06, 60), (70, 0.5, 60), (80, 0.01, None), (90, 0.05, 90)]:
        trainer.step = step
        trainer._follow_cooldown_trigger({key: metric}, progress)
        assert trainer.cooldown_from == expected, step
        assert trainer.last_step == (200 if expected is None else expected + 20)
    assert learning_rate(89, config.train, trainer.cooldown_from) == 1e-2
    assert learning_rate(90, config.train, trainer.cooldown_from) == 1e-4


@pytest.mark.parametrize("environment", [{"TQDM_DISABLE": "1"}, {}], ids=["TQDM_DISABLE=1", "as usual"])
def test_the_progress_bar_honours_tqdm_disable(tmp_path, environment):
    """TQDM_DISABLE=1 is how a log or a CI job turns every tqdm bar off; the training bar ignored it."""
    args = [a for a in TINY if a != "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"} | {"OMP_NUM_THREADS": "1"} | environment
    done = subprocess.run(
        [sys.executable, "-m", "gpt_train", *args, "--steps", "3", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert ("it/s" in done.stderr) == (not environment)


def test_a_metric_where_lower_is_better_reaches_its_cool_down_trigger_from_above(cli, tmp_path):
    """A text run's primary metric is bits per character: 3.5 does not reach a trigger of 1.5 (it started the
    cool-down there, and the run ended at a fraction of its steps in silence)."""
    assert cli(*TINY, *TRIGGERED, "--out", tmp_path, "--steps", "1").code == 0
    config = RunConfig.load(tmp_path)
    train = dataclasses.replace(config.train, steps=200, cooldown_trigger=1.5)
    config = dataclasses.replace(config, higher_is_better=False, train=train)
    trainer, key = trainer_for(config, tmp_path), config.primary_metric
    progress = Progress(config, 0, quiet=True)
    for step, metric, expected in [
        (40, 3.5, None),
        (60, 1.5, 60),
        (70, 1.2, 60),
        (80, 1.6, None),
        (90, float("nan"), None),
    ]:
        trainer.step = step
        trainer._follow_cooldown_trigger({key: metric}, progress)
        assert trainer.cooldown_from == expected, step


# The triton set's first-step check (a step of the fast set beside it) with dropout drawing from the global stream;
# the reference set stands in for Triton, which runs on a GPU or in its interpreter.
TRITON_DROPOUT = ["--set", "kernels=triton", "--set", "dropout=0.1"]  # --kernels lists the sets found at import


@pytest.mark.parametrize(
    ("extra", "stop_at"), [([], 17), (GROKFAST, 17), (RANDOMIZED, 17), (TRIGGERED, 25), (TRITON_DROPOUT, 17)],
    ids=["plain", "grokfast", "randomized", "triggered", "triton-dropout"],
)  # fmt: skip
def test_interrupted_then_resumed_run_ends_with_the_same_weights(cli, tmp_path, extra, stop_at, monkeypatch):
    """With Grokfast on, its gradient averages travel in the checkpoint: restarting them would change the weights.
    Randomized positions continue the checkpointed global RNG stream. A cool-down started by its trigger before
    the stop continues from where it started, and the resumed run ends where the whole one did. The triton set's
    check at each process's first step builds a model without drawing from the stream dropout draws from."""
    if extra == TRITON_DROPOUT:
        monkeypatch.setattr(gpt_core.kernels, "_triton_installed", lambda: False)  # triton from _sets alone
        monkeypatch.setitem(KERNEL_SETS._sets, "triton", KERNEL_SETS["reference"])
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert cli(*TINY, *extra, "--out", whole).code == 0
    assert cli(*TINY, *extra, "--out", split, "--steps", "1").code == 0  # lay out the run directory and config
    config = RunConfig.load(whole)
    config.save(split)
    (split / RunLayout.CHECKPOINT).unlink()
    (split / RunLayout.METRICS).unlink()
    trainer = trainer_for(config, split)
    trainer.on_step = interrupt_at(trainer, stop_at)
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("interrupted", stop_at)
    interrupted = load_checkpoint(split / RunLayout.CHECKPOINT, "sort")
    assert interrupted.step == stop_at
    assert interrupted.cooldown_from == (20 if extra == TRIGGERED else None)
    assert set(interrupted.grokfast) == (set(interrupted.model) if extra == GROKFAST else set())

    assert cli("run", "--resume", split, "--quiet").code == 0
    expected, resumed = tensors_of(whole), tensors_of(split)
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[k], resumed[k]) for k in expected)
    strip = lambda records: [{k: v for k, v in r.items() if k != "elapsed"} for r in records]
    assert strip(read_metrics(split)) == strip(read_metrics(whole))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_sigint_or_sigterm_stops_cleanly_with_a_checkpoint_and_the_resume_command(tmp_path, signum):
    """SIGTERM is what a scheduler's preemption, `timeout` and `docker stop` send; it killed the run mid-step."""
    run_dir = tmp_path / "run"
    args = [a for a in TINY if a != "--quiet"]
    steps = args.index("--steps")
    args[steps + 1] = "100000"
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt_train", *args, "--out", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (run_dir / RunLayout.CHECKPOINT).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert f"gpt-train run --resume {run_dir}" in err
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    assert state.step > 0


def test_a_reader_that_goes_away_stops_the_run_with_a_checkpoint(tmp_path):
    """`gpt-train run ... 2>&1 | head -1`: the progress bar's next write (BrokenPipeError) ended the run with none."""
    run_dir = tmp_path / "run"
    args = [a for a in TINY if a != "--quiet"]
    args[args.index("--steps") + 1] = "100000"
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "gpt_train", *args, "--out", str(run_dir)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.stderr.read(1)  # the progress bar has started; then its reader goes
    proc.stderr.close()
    assert proc.wait(timeout=120) == 130  # as a Ctrl-C: stopped, resumable
    assert 0 < load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step < 100000


def closed_pipe() -> int:
    read, write = os.pipe()
    os.close(read)
    return write


def test_a_finished_run_whose_summary_has_no_reader_keeps_everything(tmp_path):
    args = [a for a in TINY if a != "--quiet"]
    stdout = closed_pipe()
    command = [sys.executable, "-m", "gpt_train", *args, "--out", str(tmp_path / "run")]
    proc = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, text=True)
    os.close(stdout)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / RunLayout.FINAL).is_file() and "Error" not in proc.stderr


@pytest.mark.parametrize("encoding", [None, "ascii"], ids=["utf-8", "ascii: click writes to the byte stream"])
def test_a_listing_into_a_closed_pipe_ends_quietly(encoding):
    stdout, env = closed_pipe(), os.environ | ({"PYTHONIOENCODING": encoding} if encoding else {})
    command = [sys.executable, "-m", "gpt_train", "tasks"]
    proc = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    os.close(stdout)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("at", [14, 4], ids=["after a checkpoint", "before any"])
def test_a_second_ctrl_c_stops_at_once_keeping_the_checkpoint_on_disk(cli, tmp_path, at):
    """A step or an evaluation that never ends (a sampler starved by its split) could not be stopped but by kill."""
    assert cli(*TINY, "--out", tmp_path, "--steps", "1").code == 0  # lay out the run directory and config
    (tmp_path / RunLayout.CHECKPOINT).unlink()
    config = RunConfig.load(tmp_path)
    trainer = trainer_for(dataclasses.replace(config, train=dataclasses.replace(config.train, steps=30)), tmp_path)

    def two_ctrl_cs(step: int) -> None:
        if step == at:
            os.kill(os.getpid(), signal.SIGINT)  # the first asks for a stop after this step
            time.sleep(REPEAT_GRACE)
            os.kill(os.getpid(), signal.SIGINT)  # the second raises here, inside the step

    trainer.on_step = two_ctrl_cs
    outcome = trainer.run()
    if at < 10:  # nothing to resume from; it was "aborted", with no word of how to start it again
        assert (outcome.reason, outcome.step) == ("interrupted", at)
        assert "before its first checkpoint: --resume starts it again" in outcome.detail
        assert not (tmp_path / RunLayout.CHECKPOINT).exists()
        return
    assert (outcome.reason, outcome.step) == ("interrupted", at)
    assert outcome.detail == "stopped at once; the checkpoint of step 10 is kept"
    assert load_checkpoint(tmp_path / RunLayout.CHECKPOINT, "sort").step == 10


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_twice_at_once_as_timeout_sends_it_stops_after_the_step_with_a_checkpoint(cli, tmp_path, signum):
    """GNU timeout signals the process, then its process group: a few milliseconds apart, the second was a "second
    Ctrl-C" and stopped the run at once, dropping every step since the last checkpoint."""
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir, "--steps", "1").code == 0
    config = RunConfig.load(run_dir)
    (run_dir / RunLayout.CHECKPOINT).unlink()
    trainer = trainer_for(dataclasses.replace(config, train=dataclasses.replace(config.train, steps=30)), run_dir)

    def twice(step: int) -> None:
        if step == 14:
            os.kill(os.getpid(), signum)
            time.sleep(0.01)  # as a busy machine delays timeout's second kill
            os.kill(os.getpid(), signum)

    trainer.on_step = twice
    outcome = trainer.run()
    assert (outcome.reason, outcome.step, outcome.detail) == ("interrupted", 14, "checkpoint written")
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == 14


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir, "--steps", "1").code == 0
    config = RunConfig.load(run_dir)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=30))
    (run_dir / RunLayout.CHECKPOINT).unlink()
    trainer = trainer_for(config, run_dir)

    def poison(step: int) -> None:
        if step == 12:  # after the checkpoint at step 10
            with torch.no_grad():
                trainer.model.wte.weight.fill_(float("nan"))

    trainer.on_step = poison
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("diverged", 12)
    assert "loss became nan at step 13" in outcome.detail and "last good checkpoint" in outcome.detail
    state = load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort")
    assert state.step == 10
    assert all(torch.isfinite(t).all() for t in state.model.values())


def lagged_trainer(cli, tmp_path: Path, *settings: str) -> Trainer:
    """A 30-step sort trainer (logs every 5 steps, evaluates and saves every 10) with no `on_step` hook, so the loop
    reads most steps' losses a step late."""
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir, "--steps", "1", *settings).code == 0
    config = RunConfig.load(run_dir)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, steps=30))
    (run_dir / RunLayout.CHECKPOINT).unlink()
    return trainer_for(config, run_dir)


def watch_steps(trainer: Trainer, monkeypatch, before_step=lambda taken: None) -> list[tuple[str, list[int]]]:
    """What the loop does, in order: ("take", [n]) as step n is queued, ("read", steps) as their losses are read."""
    events: list[tuple[str, list[int]]] = []
    take, read = Trainer.train_step, Rank.read

    def taking(self, step):
        before_step(step)
        events.append(("take", [step + 1]))
        return take(self, step)

    def reading(self, reduced):
        if reduced:
            events.append(("read", list(range(trainer.step + 1, trainer.step + 1 + len(reduced)))))
        return read(self, reduced)

    monkeypatch.setattr(Trainer, "train_step", taking)
    monkeypatch.setattr(Rank, "read", reading)
    return events


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_a_steps_loss_is_read_while_the_next_step_runs_unless_the_loop_acts_on_that_step(
    cli, tmp_path, monkeypatch, dtype
):
    """Reading step n's loss once step n + 1 is queued keeps a GPU busy while the host reads. A step that is logged,
    evaluated or saved (every 5th here) is read at once, before the next is queued. fp16's count of skipped steps
    is read with the loss (CPU's GradScaler standing for CUDA's)."""
    trainer = lagged_trainer(cli, tmp_path)
    if dtype == "fp16":
        trainer.precision = Precision("fp16", torch.device("cpu"), torch.amp.GradScaler("cpu"))
    events = watch_steps(trainer, monkeypatch)
    assert trainer.run().reason == "finished"
    expected, pending = [], []
    for n in range(1, 31):
        expected.append(("take", [n]))
        pending.append(n)
        ready, pending = (pending, []) if n % 5 == 0 else (pending[:-1], pending[-1:])
        expected += [("read", ready)] if ready else []
    assert events == expected


def test_reading_a_step_late_changes_no_metric_evaluation_snapshot_or_checkpoint(cli, tmp_path, monkeypatch):
    """Evaluations (every 7 steps), checkpoints (every 6) and snapshots (every 4) fall on steps that are not logged
    (every 5): each must see its own step's weights, never the next step's, as a run reading every step at once."""
    settings = ("--set", "eval_every=7", "--set", "checkpoint_every=6", "--set", "snapshot_every=4")
    seen = {}

    def run(name: str) -> tuple[list[dict], dict]:  # metrics.jsonl and final.json, less the clock
        trainer = lagged_trainer(cli, tmp_path / name, *settings)
        weights = seen[name] = {}
        for method in ("save", "keep_snapshot", "evaluate"):
            original = getattr(trainer, method)

            def watched(*args, _original=original, _method=method):
                weights[_method, trainer.step] = [p.detach().clone() for p in trainer.model.parameters()]
                return _original(*args)

            setattr(trainer, method, watched)
        assert trainer.run().reason == "finished"
        drop = lambda record: {k: v for k, v in record.items() if k != "elapsed"}
        final = json.loads((tmp_path / name / "run" / "final.json").read_text())
        return [drop(r) for r in read_metrics(tmp_path / name / "run")], drop(final)

    records = run("lagged")
    monkeypatch.setattr(Trainer, "_acts_at", lambda self, step: True)
    assert records == run("at_once")
    # keep_snapshot runs after every step and writes at every 4th
    acted = lambda seen: {key: w for key, w in seen.items() if key[0] != "keep_snapshot" or key[1] % 4 == 0}
    lagged, at_once = acted(seen["lagged"]), acted(seen["at_once"])
    assert lagged.keys() == at_once.keys()
    assert {("evaluate", 7), ("save", 6), ("keep_snapshot", 4), ("save", 30)} <= lagged.keys()
    for key, weights in lagged.items():
        assert all(torch.equal(a, b) for a, b in zip(weights, at_once[key], strict=True)), key


def test_a_nan_loss_read_a_step_late_still_stops_at_its_own_step_and_keeps_the_last_good_checkpoint(
    cli, tmp_path, monkeypatch
):
    """Step 14 is queued on the spoilt weights before step 13's loss is read; nothing is saved from them."""
    trainer = lagged_trainer(cli, tmp_path)

    def poison(taken: int) -> None:
        if taken == 12:  # before step 13, after the checkpoint at step 10
            with torch.no_grad():
                trainer.model.wte.weight.fill_(float("nan"))

    events = watch_steps(trainer, monkeypatch, poison)
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("diverged", 12)
    assert "loss became nan at step 13" in outcome.detail and "last good checkpoint" in outcome.detail
    assert events[-2:] == [("take", [14]), ("read", [13])]
    state = load_checkpoint(tmp_path / "run" / RunLayout.CHECKPOINT, "sort")
    assert state.step == 10 and all(torch.isfinite(t).all() for t in state.model.values())


def test_ctrl_c_reads_the_step_at_once_and_saves_it(cli, tmp_path, monkeypatch):
    trainer = lagged_trainer(cli, tmp_path)
    events = watch_steps(trainer, monkeypatch, lambda taken: setattr(trainer.stop, "requested", taken == 12))
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("interrupted", 13)
    assert events[-3:] == [("read", [11]), ("take", [13]), ("read", [12, 13])]
    assert load_checkpoint(tmp_path / "run" / RunLayout.CHECKPOINT, "sort").step == 13


def test_under_torchrun_a_stop_read_a_step_late_stops_every_rank_after_the_step_already_queued(
    cli, tmp_path, monkeypatch
):
    """Rank 0's Ctrl-C during step 13 travels in step 13's exchange, read while step 14 runs: every rank reads the
    same flags at the same steps, so each stops after step 14 and none queues step 15 (whose all-reduce would wait
    for ranks that have stopped)."""
    no_group = lambda model, device_ids: (setattr(model, "no_sync", contextlib.nullcontext), model)[1]
    monkeypatch.setattr("gpt_train.trainer.DistributedDataParallel", no_group)
    monkeypatch.setattr(Rank, "barrier", lambda self: None)
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    sent = lambda value, flag: Unread(torch.tensor([2 * float(value), float(flag)], dtype=torch.float64))  # summed
    monkeypatch.setattr(Rank, "reduced", lambda self, value, flag, device: sent(value, flag))
    config = RunConfig.load(run_dir)
    (run_dir / RunLayout.CHECKPOINT).unlink()
    for name in (RunLayout.METRICS, RunLayout.FINAL):
        (run_dir / name).unlink()
    run = Run(config, config.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(0, 0, 2), resume=False)
    trainer = Trainer(run, quiet=True)
    events = watch_steps(trainer, monkeypatch, lambda taken: setattr(trainer.stop, "requested", taken == 12))
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("interrupted", 14)
    assert events[-5:] == [("take", [13]), ("read", [12]), ("take", [14]), ("read", [13]), ("read", [14])]
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == 14


GLOO_PEER_LOST = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:25763: "
    "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application."
)  # what gloo's all-reduce raised on rank 0 when torchrun's rank 1 was killed (torch 2.13)


@pytest.mark.parametrize("kernel", [[], ["--kernel", "gelu=gpt_core.kernels.gelu:gelu"]], ids=["set", "chosen"])
def test_under_torchrun_a_lost_rank_is_one_line_that_blames_no_kernel_of_this_one(cli, tmp_path, monkeypatch, kernel):
    """Rank 0 ended in gloo's traceback, or, with kernels chosen, blamed its own kernel for the other rank's death."""
    monkeypatch.setattr("gpt_train.trainer.DistributedDataParallel", lambda model, device_ids: model)
    monkeypatch.setattr(Rank, "barrier", lambda self: None)
    run_dir = tmp_path / "run"
    assert cli(*TINY, *kernel, "--steps", "1", "--out", run_dir).code == 0, "a run to take the configuration of"
    config = RunConfig.load(run_dir)
    for name in (RunLayout.CHECKPOINT, RunLayout.METRICS, RunLayout.FINAL):
        (run_dir / name).unlink()
    run = Run(config, config.build_task(), RunLayout(run_dir), torch.device("cpu"), Rank(0, 0, 2), resume=False)
    trainer = Trainer(run, quiet=True)

    def lost(step):
        raise RuntimeError(GLOO_PEER_LOST)

    monkeypatch.setattr(trainer, "train_step", lost)
    with pytest.raises(DistributedError, match="step 1: another rank stopped, or the connection to it broke") as error:
        trainer.run()
    assert "kernel" not in str(error.value) and "no checkpoint was written yet" in str(error.value)


def test_only_a_collectives_error_on_losing_a_rank_is_read_as_one():
    assert lost_a_rank(RuntimeError(GLOO_PEER_LOST)) is not None and lost_a_rank(RuntimeError("boom")) is None
    nccl = torch.distributed.DistBackendError
    assert lost_a_rank(nccl("NCCL error: remote process exited or there was a network error")) is not None
    assert lost_a_rank(nccl("NCCL error: unhandled cuda error, an illegal memory access")) is None  # this rank's


@pytest.mark.parametrize("extra", [[], TRIGGERED], ids=["plain", "triggered"])
def test_torchrun_trains_on_two_gloo_processes_that_agree_on_weights(tmp_path, extra):
    """Triggered: only rank 0 evaluates, and both ranks still drop the rate and stop at the same step (a rank
    that did not would wait for the other in the next all-reduce until the timeout)."""
    run_dir = tmp_path / "ddp"
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    port = "29518" if extra else "29517"  # each case its own, should both run at once
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port,
               "-m", "gpt_train", *TINY[:TINY.index("--steps")], "--steps", "20", "--out", str(run_dir),
               *TINY[TINY.index("--batch-size"):], *extra]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[:4000]  # the ranks' own output comes before torchrun's traceback
    assert "detach" not in done.stderr, done.stderr[-3000:]  # PyTorch's warning about our own code
    final = json.loads((run_dir / RunLayout.FINAL).read_text())
    assert final["world_size"] == 2
    first, second = final["rank_weight_checksums"]
    assert first == second
    records = read_metrics(run_dir)
    losses = [r["loss"] for r in records]
    assert losses[-1] < losses[0]
    if extra:
        reached = next(r["step"] for r in records if r.get("heldout_exact_match", 0) >= 0.05)
        assert reached < 180 and records[-1]["step"] == reached + 20


@pytest.mark.parametrize(
    ("case", "port"), [("finished", "29519"), ("locked", "29520")], ids=["a-finished-run", "a-locked-run"]
)
def test_under_torchrun_rank_0_refusing_the_directory_ends_every_rank_at_once_in_one_line(
    cli, tiny_run, tmp_path, case, port
):
    """Rank 0 alone lays out and locks the directory: its refusal ended rank 0 before it joined the process group,
    and rank 1 waited there for it until torchrun killed it, 30 s later, in a traceback. Every rank now waits for
    rank 0's verdict, so each ends at once with one line: rank 0 its reason, rank 1 naming it."""
    args = [*TINY, "--out", str(tiny_run)] if case == "finished" else ["run", "--resume", str(tiny_run), "--quiet"]
    reason = "already holds a finished run" if case == "finished" else "is in use by another gpt-train process"
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    logs = tmp_path / "logs"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port,
               "--log-dir", str(logs), "--redirects", "3", "-m", "gpt_train", *args]  # fmt: skip
    before = sorted(path.name for path in tiny_run.iterdir())
    lock = RunLock(tiny_run).acquire() if case == "locked" else None  # as another gpt-train process holds it
    try:
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        took = time.monotonic() - started
    finally:
        if lock is not None:
            lock.release()
    assert done.returncode != 0 and took < 20, (done.returncode, took)
    said = {int(path.parent.name): path.read_text() for path in logs.rglob("stderr.log")}  # each rank's stderr
    assert said.keys() == {0, 1}, done.stderr[-3000:]
    for rank, err in said.items():
        lines = err.strip().splitlines()
        assert len(lines) == 1 and reason in lines[0], err
        assert lines[0].startswith("gpt-train: error: " + "[rank 1] rank 0 stopped before training: " * rank), err
    assert sorted(path.name for path in tiny_run.iterdir()) == before


def test_under_torchrun_each_rank_draws_its_own_dropout_masks_and_a_resumed_rank_the_same_ones(
    cli, tmp_path, monkeypatch
):
    """Every rank seeds the global generator with the run's seed, for the same initial weights; dropout then drew
    the same masks on every rank's different batch."""
    assert cli(*TINY, "--set", "dropout=0.1", "--out", tmp_path, "--steps", "1").code == 0
    config = RunConfig.load(tmp_path)
    monkeypatch.setattr("gpt_train.trainer.DistributedDataParallel", lambda model, device_ids: model)  # no group

    def masks(rank: int, step: int) -> torch.Tensor:
        run = Run(config, config.build_task(), RunLayout(tmp_path), torch.device("cpu"), Rank(rank, rank, 2), False)
        trainer = Trainer(run, quiet=True)
        trainer.draw_batch(step)
        return torch.rand(64) < 0.1  # what dropout draws next

    first, second = masks(0, 5), masks(1, 5)
    next_batch = torch.Generator().manual_seed(((config.train.seed * 1_000_003 + 1) * 1_000_000_007 + 6) % 2**63)
    assert not torch.equal(torch.rand(64, generator=next_batch) < 0.1, second)  # not the next step's batch stream
    assert not torch.equal(first, second)
    assert torch.equal(masks(1, 5), second)  # a resumed rank 1 at step 5
    assert not torch.equal(masks(1, 6), second)


def test_under_torchrun_a_rank_stops_only_when_every_rank_has_agreed(cli, tmp_path, monkeypatch):
    """A Ctrl-C that one rank took while it waited in the exchange of the stop flag stopped it alone: the other
    rank went on to the next step's all-reduce and failed, with no checkpoint written."""
    assert cli(*TINY, "--out", tmp_path).code == 0
    config = RunConfig.load(tmp_path)
    no_group = lambda model, device_ids: (setattr(model, "no_sync", contextlib.nullcontext), model)[1]
    monkeypatch.setattr("gpt_train.trainer.DistributedDataParallel", no_group)
    monkeypatch.setattr(Rank, "barrier", lambda self: None)
    exchanged = []  # each step's flag as this rank sent it; the other rank's is False
    sent = lambda value, flag: Unread(torch.tensor([2 * float(value), float(flag)], dtype=torch.float64))  # summed
    monkeypatch.setattr(
        Rank, "reduced", lambda self, value, flag, device: (exchanged.append(flag), sent(value, flag))[1]
    )
    run = Run(config, config.build_task(), RunLayout(tmp_path), torch.device("cpu"), Rank(0, 0, 2), resume=False)
    trainer = Trainer(run, quiet=True)
    trainer.on_step = interrupt_at(trainer, 5)  # after step 5's exchange
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("interrupted", 6)  # at the next exchange, with every rank
    assert exchanged == [False] * 5 + [True]


@pytest.mark.parametrize(
    ("environment", "command"),
    [
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"},
         "Resume with: torchrun --nproc_per_node 4 -m gpt_train run --resume r"),
        ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"},
         "Resume on each node, with its rendezvous options: torchrun --nnodes 2 --nproc_per_node 8 -m gpt_train run "
         "--resume r"),
    ],
    ids=["one node", "two nodes"],
)  # fmt: skip
def test_the_resume_command_starts_the_processes_per_node_the_run_had(monkeypatch, environment, command):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert resume_hint(Rank(1, 1, int(environment["WORLD_SIZE"])), Path("r")) == command


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dtype", "fp8", "dtype must be one of fp32, bf16, fp16, got 'fp8'"),
        ("schedule", "linear", "schedule must be one of cosine, constant, got 'linear'"),
    ],
)
def test_train_settings_made_in_python_refuse_an_unknown_choice(field, value, message):
    with pytest.raises(ValueError) as raised:
        TrainSettings(**{field: value})
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        ({"exact": 1.0}, "evaluate() returned no primary metric 'exact_match' (got: exact)"),
        ({"exact_match": torch.tensor(1.0)}, "evaluate() returned exact_match as a Tensor"),
        ({"exact_match": 1.0, "examples": True}, "evaluate() returned examples as a bool"),
    ],
)
def test_an_evaluation_outside_the_contract_is_one_error_at_the_first_evaluation(returned, said):
    """A plugin task missing its primary metric trained to the end, then raised KeyError; a tensor metric raised
    in json.dumps."""
    task = get_task("sort", length=4)
    with pytest.raises(MetricsError, match=re.escape(said)):
        checked_metrics(task, returned)
    assert checked_metrics(task, {"exact_match": 1, "token_accuracy": 0.5}) == {"exact_match": 1, "token_accuracy": 0.5}


SORT_4 = get_task("sort", length=4)  # batches (B, 7), its block_size; vocabulary 0 to 9
GOOD = SORT_4.batch(3, torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        ((GOOD.inputs, GOOD.targets), "a tuple, not a gpt_tasks.Batch"),
        (Batch(GOOD.inputs.float(), GOOD.targets), "inputs as torch.float32 (3, 7); a Batch holds (B, T) token ids"),
        (Batch(GOOD.inputs.tolist(), GOOD.targets), "inputs as list; a Batch holds (B, T) token ids"),
        (Batch(GOOD.inputs[..., None], GOOD.targets), "inputs as torch.int64 (3, 7, 1)"),
        (Batch(GOOD.inputs, GOOD.targets[:, :-1]), "inputs (3, 7) and targets (3, 6): the same (B, T)"),
        (Batch(GOOD.inputs[:0], GOOD.targets[:0]), "inputs (0, 7) and targets (0, 7): the same (B, T), B >= 1"),
        (Batch(GOOD.inputs.repeat(1, 2), GOOD.targets.repeat(1, 2)), "T from 1 to the task's block_size 7"),
        (Batch(GOOD.inputs + 1000, GOOD.targets), "input ids from 100"),
        (Batch(GOOD.inputs - 5, GOOD.targets), "input ids from -"),
        (Batch(GOOD.inputs, GOOD.targets.clamp(min=0) + 10), "the vocabulary has 0 to 9 (and -100 for an unscored"),
    ],
)
def test_a_batch_outside_the_contract_is_one_error_naming_the_task_at_the_first_step(returned, said):
    """A plugin's batch of floats, of another shape or of ids past the vocabulary failed deep in the model with a
    traceback; one longer than the block trained a rope model on lengths the task never asks for."""
    with pytest.raises(BatchError, match=r"^task 'sort': batch\(\) returned .*" + re.escape(said)):
        checked_batch(SORT_4, returned)
    assert checked_batch(SORT_4, GOOD) is GOOD
    assert checked_batch(SORT_4, Batch(GOOD.inputs.int(), GOOD.targets.int())).inputs.dtype == torch.int32


def test_a_run_whose_task_makes_a_wrong_batch_stops_at_its_first_step_in_one_line(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(type(SORT_4), "batch", lambda self, size, generator: Batch(GOOD.inputs + 1000, GOOD.targets))
    result = cli(*TINY, "--out", tmp_path / "run")
    assert_one_line_error(result, "task 'sort': batch() returned input ids from 100")
    assert not (tmp_path / "run" / RunLayout.CHECKPOINT).exists()
