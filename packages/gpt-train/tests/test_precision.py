"""Training precision: a bf16 run keeps its dtype through resume; fp16's loss scaling skips an overflowing
step and the divergence checks still stop a run; a bf16 run is scored in float32; verify --dtype bf16;
bad settings are one line.

fp16 needs CUDA in a run, but autocast and torch.amp.GradScaler both run on CPU: the fp16 tests put CPU's
scaler in a Trainer, so the loss scaling, the skipped steps and the divergence checks are the CUDA run's
code on CPU arithmetic. What they cannot show is CUDA's own fp16 kernels (their overflow points, speed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from train_helpers import TINY, assert_one_line_error

from gpt_train.checkpoint import load_checkpoint
from gpt_train.config import RunConfig, resolve_run_config
from gpt_train.distributed import Rank
from gpt_train.loading import load_run
from gpt_train.precision import MAX_SKIPPED_STEPS, Precision
from gpt_train.runs import Run
from gpt_train.trainer import Trainer
from gpt_viz import RunLayout

SMALL = {"length": 4, "n_layer": 1, "n_embd": 32, "n_head": 2, "batch_size": 32, "eval_every": 10,
         "eval_limit": 50, "checkpoint_every": 10, "log_every": 5, "final_eval_limit": 50}  # fmt: skip


def fp16_trainer(run_dir: Path, **settings) -> Trainer:
    config, task = resolve_run_config("sort", SMALL | settings)
    trainer = Trainer(Run(config, task, RunLayout(run_dir), torch.device("cpu"), Rank(), resume=False), quiet=True)
    trainer.precision = Precision("fp16", torch.device("cpu"), torch.amp.GradScaler("cpu"))
    return trainer


def make_gradients_non_finite(trainer: Trainer, at: set[int] | None = None, from_step: int | None = None) -> None:
    """From now on, the token embedding's gradient is nan at the steps `at` (or every step from `from_step`), counted
    from 0 as they are taken (`trainer.step` counts the steps read, which may lag one behind)."""
    taking, draw = [], trainer.draw_batch
    trainer.draw_batch = lambda step: (taking.append(step), draw(step))[1]

    def poison(grad: torch.Tensor) -> torch.Tensor:
        hit = taking[-1] in at if at is not None else taking[-1] >= from_step
        return grad * math.nan if hit else grad

    trainer.model.wte.weight.register_hook(poison)


def test_fp16_scaler_skips_the_step_whose_gradients_are_not_finite_and_the_run_goes_on(tmp_path):
    """Step 6 (index 5) gets a nan gradient: its update is skipped (weights unchanged), the scale halves,
    the next step updates again, and Grokfast's gradient averages never see the nan."""
    trainer = fp16_trainer(tmp_path, steps=12, grokfast_lambda=2.0)
    make_gradients_non_finite(trainer, at={5})
    weights, scales = {}, {}

    def record(step: int) -> None:
        weights[step] = trainer.model.blocks[0].mlp.fc.weight.detach().clone()
        scales[step] = trainer.precision.scale

    trainer.on_step = record
    outcome = trainer.run()
    assert outcome.reason == "finished"
    assert torch.equal(weights[6], weights[5])
    assert not torch.equal(weights[5], weights[4]) and not torch.equal(weights[7], weights[6])
    assert scales[6] == scales[5] / 2
    assert all(torch.isfinite(average).all() for average in trainer.grokfast.state_dict().values())
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_fp16_gradients_that_stay_non_finite_end_the_run_as_diverged(tmp_path):
    trainer = fp16_trainer(tmp_path, steps=80)
    make_gradients_non_finite(trainer, from_step=12)
    outcome = trainer.run()
    last = 12 + MAX_SKIPPED_STEPS  # the step (1-based) whose skip made 50 in a row
    assert (outcome.reason, outcome.step) == ("diverged", last - 1)
    assert f"gradients were not finite for {MAX_SKIPPED_STEPS} steps in a row" in outcome.detail
    assert f"at step {last}; stopped (the last good checkpoint is" in outcome.detail
    state = load_checkpoint(tmp_path / RunLayout.CHECKPOINT, "sort")
    assert state.step == 60 and all(torch.isfinite(t).all() for t in state.model.values())


def host_reads(fn) -> int:
    """How many times `fn` reads a tensor's value back to the host (each read waits for a GPU's queue to empty),
    kernels' own reads included, as PyTorch's profiler records them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return sum(event.name == "aten::_local_scalar_dense" for event in profile.events())


def test_an_fp16_step_reads_the_device_no_more_than_an_fp32_step(tmp_path):
    """fp16's loss scaling decides on the device whether a step is skipped, and counts the skips there: its step
    reads what an fp32 step reads (on a CPU, the fused AdamW kernel's own reads of its step counts; none on CUDA).
    Its loss and skip count are read later, beside each other."""
    fp16 = fp16_trainer(tmp_path / "fp16", steps=12)
    fp32 = fp16_trainer(tmp_path / "fp32", steps=12)
    fp32.precision = Precision("fp32", torch.device("cpu"))
    for trainer in (fp16, fp32):
        trainer.train_step(0)  # the first step makes the optimiser's state
    assert host_reads(lambda: fp16.train_step(1)) == host_reads(lambda: fp32.train_step(1))
    make_gradients_non_finite(fp16, at={2})
    loss, skipped = fp16.train_step(2)
    assert math.isfinite(loss.read()) and skipped.read() == 1
    assert fp16.train_step(3)[1].read() == 0


def test_a_non_finite_loss_still_stops_an_fp16_run_at_once(tmp_path):
    trainer = fp16_trainer(tmp_path, steps=30)

    def poison(step: int) -> None:
        if step == 12:
            with torch.no_grad():
                trainer.model.wte.weight.fill_(float("nan"))

    trainer.on_step = poison
    outcome = trainer.run()
    assert (outcome.reason, outcome.step) == ("diverged", 12)
    assert "loss became nan at step 13" in outcome.detail


def test_an_interrupted_fp16_run_resumes_with_its_loss_scale(tmp_path, monkeypatch):
    """The scale halved at step 6 travels in the checkpoint of step 8: the resumed run goes on at 2^15, not
    at a fresh scaler's 2^16, and ends with the uninterrupted run's weights and scale."""
    monkeypatch.setattr(
        Precision, "for_run", lambda dtype, device: Precision("fp16", device, torch.amp.GradScaler("cpu"))
    )
    config, task = resolve_run_config("sort", SMALL | {"steps": 12})

    def trainer_in(run_dir: Path, resume: bool = False) -> Trainer:
        run_dir.mkdir(exist_ok=True)
        trainer = Trainer(Run(config, task, RunLayout(run_dir), torch.device("cpu"), Rank(), resume), quiet=True)
        make_gradients_non_finite(trainer, at={5})
        return trainer

    whole = trainer_in(tmp_path / "whole")
    assert whole.run().reason == "finished"
    interrupted = trainer_in(tmp_path / "split")
    interrupted.on_step = lambda step: setattr(interrupted.stop, "requested", step == 8)
    assert interrupted.run().reason == "interrupted"
    resumed = trainer_in(tmp_path / "split", resume=True)
    assert (resumed.step, resumed.precision.scale) == (8, 2.0**15)
    assert resumed.run().reason == "finished"
    assert resumed.precision.scale == whole.precision.scale == 2.0**15
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.parameters(), whole.model.parameters(), strict=True))


def test_a_bf16_run_records_its_dtype_and_a_resumed_run_keeps_it(cli, tmp_path):
    """Interrupted at step 17 and resumed: the same weights, bit for bit, as the run that was not stopped.
    A resume in float32 would end elsewhere (the last check pins that the two precisions differ)."""
    whole, split, fp32 = tmp_path / "whole", tmp_path / "split", tmp_path / "fp32"
    bf16 = ("--set", "dtype=bf16")
    assert cli(*TINY, *bf16, "--out", whole).code == 0
    assert json.loads((whole / RunLayout.CONFIG).read_text())["train"]["dtype"] == "bf16"
    config = RunConfig.load(whole)
    split.mkdir()
    config.save(split)
    run = Run(config, config.build_task(), RunLayout(split), torch.device("cpu"), Rank(), resume=False)
    trainer = Trainer(run, quiet=True)

    def stop_at_17(step: int) -> None:
        trainer.stop.requested = step == 17

    trainer.on_step = stop_at_17
    assert trainer.run().reason == "interrupted"
    assert cli("run", "--resume", split, "--quiet").code == 0
    assert cli(*TINY, "--out", fp32).code == 0
    expected, resumed, in_fp32 = (load_checkpoint(d / RunLayout.CHECKPOINT, "sort").model for d in (whole, split, fp32))
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
    assert not all(torch.equal(expected[name], in_fp32[name]) for name in expected)


def test_a_bf16_runs_final_metrics_are_scored_in_float32_as_eval_scores_them(cli, tmp_path):
    """A character-level text run (its held-out loss is a continuous number) trained in bf16: final.json's
    loss is exactly what `gpt-train eval` prints, and scoring the same weights under bf16 autocast gives
    another number, so a final evaluation under the training dtype would fail the first check."""
    corpus, run_dir = tmp_path / "corpus.txt", tmp_path / "run"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 300, encoding="utf-8")
    result = cli(
        "run", "--task", "text", "--data", corpus, "--device", "cpu", "--quiet", "--steps", "6",
        "--set", "block_size=16", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2",
        "--set", "eval_every=3", "--set", "eval_limit=8", "--set", "dtype=bf16", "--out", run_dir,
    )  # fmt: skip
    assert result.code == 0, result.err
    final = json.loads(RunLayout(run_dir).final.read_text())
    printed = json.loads(cli("eval", run_dir, "--json").out)
    assert printed["loss"] == final["heldout_loss"]
    run = load_run(run_dir, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        in_bf16 = run.task.evaluate(run.model, "heldout", torch.device("cpu"))
    assert in_bf16["examples"] == printed["examples"]
    assert in_bf16["loss"] != printed["loss"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fp8", "dtype must be one of fp32, bf16, fp16, got 'fp8'"),
        (
            "fp16",
            "dtype=fp16 needs a CUDA device (its loss scaling is for CUDA's fp16), not cpu; use dtype=bf16 or fp32",
        ),
    ],
)
def test_a_dtype_this_device_cannot_train_in_is_one_line_and_nothing_is_written(cli, tmp_path, value, message):
    assert_one_line_error(cli(*TINY, "--set", f"dtype={value}", "--out", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()


def test_resuming_an_fp16_run_on_cpu_is_one_line_and_changes_nothing(cli, tiny_run):
    path = tiny_run / RunLayout.CONFIG
    config = json.loads(path.read_text())
    config["train"]["dtype"] = "fp16"  # as a CUDA run would have written it
    path.write_text(json.dumps(config))
    before = {p.name: p.read_bytes() for p in tiny_run.iterdir()}
    assert_one_line_error(cli("run", "--resume", tiny_run), "dtype=fp16 needs a CUDA device")
    assert {p.name: p.read_bytes() for p in tiny_run.iterdir()} == before


def test_verify_in_bf16_passes_gpt_cores_kernels_relative_to_the_references_scale(cli):
    result = cli("verify", "--dtype", "bf16", "--seed", "0")
    assert result.code == 0, result.err
    header = result.out.splitlines()[0]
    assert "max |diff|/max(1,|ref|) fwd" in header and "max |diff|/max(1,|ref|) grad" in header
    assert "all 32 checks within 6e-02" in result.out


def softmax_without_max_shift(x: torch.Tensor) -> torch.Tensor:
    """Right in exact arithmetic; exp overflows on large logits (bf16 has float32's range: above ~88)."""
    exp = x.exp()
    return exp / exp.sum(dim=-1, keepdim=True)


def test_verify_in_bf16_fails_a_kernel_that_overflows(cli):
    result = cli(
        "verify", "--dtype", "bf16", "--seed", "0",
        "--kernel", "sampling_softmax=test_precision:softmax_without_max_shift",
    )  # fmt: skip
    assert_one_line_error(result, "softmax, logits x 1000: output", code=1)


def test_bf16_is_refused_on_a_gpu_that_only_emulates_it(monkeypatch):
    """torch counts emulated bf16 as supported since 2.3: a T4 passed the check and ran bf16 without hardware for it."""
    from gpt_train.config import ConfigError
    from gpt_train.precision import check_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ConfigError, match="dtype=bf16 is not supported by Tesla T4; use fp16 or fp32"):
        check_precision("bf16", torch.device("cuda"))


def test_float32_matmuls_gives_the_process_its_own_setting_back(monkeypatch):
    """A CUDA run's TF32 stayed on after it, for whatever the process computed next (a notebook, a test)."""
    from gpt_train.precision import float32_matmuls

    before = torch.get_float32_matmul_precision()
    with float32_matmuls("high"):
        assert torch.get_float32_matmul_precision() == "high"
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("backend", ["torch.backends", "torch.backends.cuda.matmul"])
def test_float32_matmuls_runs_and_restores_a_precision_set_by_backend(backend):
    """Set by backend (`torch.backends.fp32_precision`), the process's setting made the global getter raise, so a
    run failed before its first step."""
    from gpt_train.precision import float32_matmuls

    switch = torch.backends if backend == "torch.backends" else torch.backends.cuda.matmul
    cuda = torch.backends.cuda.matmul
    try:
        cuda.fp32_precision = "none"  # follows torch.backends' own (an earlier test may have set it)
        switch.fp32_precision = "tf32"
        with float32_matmuls("highest"):
            assert cuda.fp32_precision == "ieee"
        assert cuda.fp32_precision == "tf32"
        if switch is torch.backends:  # cuda.matmul follows torch.backends' own again, as before the block
            torch.backends.fp32_precision = "ieee"
            assert cuda.fp32_precision == "ieee"
    finally:
        switch.fp32_precision = cuda.fp32_precision = torch.backends.fp32_precision = "none"
    assert torch.get_float32_matmul_precision() == "highest"  # the legacy getter reads again
