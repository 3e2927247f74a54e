"""Gradient accumulation: micro-batches give the whole batch's gradients and loss, under torchrun with one
all-reduce per step, in a run as without it; bad settings are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accumulation_worker import tiny_model, whole_batch
from train_helpers import TINY, assert_one_line_error, read_metrics

from gpt_core import GPT, IGNORE_INDEX, GPTConfig
from gpt_train import accumulation
from gpt_train.accumulation import accumulate_gradients
from gpt_train.precision import Precision
from gpt_viz import RunLayout

FP32 = Precision("fp32", torch.device("cpu"))
WORKER = Path(__file__).with_name("accumulation_worker.py")


def whole_batch_gradients(batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = tiny_model()
    loss = model(batch.inputs, batch.targets, read=batch.targets != IGNORE_INDEX).loss  # as a run's step reads
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


def accumulated_gradients(batch, n: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = tiny_model()
    loss = accumulate_gradients(lambda x, t, read: model(x, t, read=read).loss, batch, n, FP32, torch.device("cpu"))
    return loss, {name: p.grad for name, p in model.named_parameters()}


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_micro_batches_give_the_whole_batchs_gradients_and_mean_loss_in_float64(n):
    """Micro-batches of 4, 2 and 1 rows, scoring different numbers of targets (a row of 8 scores none)."""
    batch = whole_batch()
    whole_loss, whole_grads = whole_batch_gradients(batch)
    loss, grads = accumulated_gradients(batch, n)
    assert largest_difference(grads, whole_grads) <= 1e-10
    assert abs(loss.item() - whole_loss.item()) <= 1e-12


def test_the_test_batch_tells_the_weighted_mean_from_a_plain_mean_of_means():
    """Its micro-batches of 2 rows score 9, 3, 7 and 5 targets: a plain average of their means is off from
    the whole batch's mean by far more than the tolerances above."""
    batch = whole_batch()
    whole_loss, _ = whole_batch_gradients(batch)
    model = tiny_model()
    means = [model(x, t).loss for x, t in zip(batch.inputs.chunk(4), batch.targets.chunk(4), strict=True)]
    assert abs(torch.stack(means).mean().item() - whole_loss.item()) > 1e-3


def test_one_micro_batch_is_the_plain_step_bit_for_bit_and_counts_nothing(monkeypatch):
    """Without accumulation nothing is counted, and the loss and gradients are exactly those of the whole batch's
    plain backward."""

    def no_counting(parts):
        raise AssertionError("scored_counts called for a single micro-batch")

    monkeypatch.setattr(accumulation, "scored_counts", no_counting)
    batch = whole_batch()
    whole_loss, whole_grads = whole_batch_gradients(batch)
    loss, grads = accumulated_gradients(batch, 1)
    assert torch.equal(loss, whole_loss)
    assert all(torch.equal(grads[name], whole_grads[name]) for name in whole_grads)


@pytest.mark.parametrize("n", [1, 4])
def test_micro_batches_are_counted_and_read_on_the_host_never_on_the_device(n):
    """A model on the meta device holds no values, as a GPU's cannot be read without waiting for its queue: each
    micro-batch is copied there, and its scored targets are counted and found on the host, so the step runs
    through (reading a value on the device would raise)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    meta = torch.device("meta")
    loss = accumulate_gradients(lambda x, t, read: model(x, t, read=read).loss, whole_batch(), n, FP32, meta)
    assert loss.device == meta and all(p.grad.device == meta for p in model.parameters())


def test_a_micro_batch_that_scores_nothing_adds_nothing():
    batch = whole_batch((3, 2, 0, 0, 5, 1, 0, 0))  # micro-batches 2 and 4 (of 4) score no target
    whole_loss, whole_grads = whole_batch_gradients(batch)
    loss, grads = accumulated_gradients(batch, 4)
    assert largest_difference(grads, whole_grads) <= 1e-10
    assert abs(loss.item() - whole_loss.item()) <= 1e-12


def test_a_batch_that_scores_nothing_is_nan_as_the_whole_batch_is():
    batch = whole_batch((0,) * 8)
    whole_loss, _ = whole_batch_gradients(batch)
    loss, _ = accumulated_gradients(batch, 4)
    assert whole_loss.isnan() and loss.isnan()


def test_under_torchrun_gradients_are_all_reduced_only_on_the_last_micro_step(tmp_path):
    """Two gloo processes, each with half the batch in 2 micro-batches, against one process with the whole
    batch: the same gradients (float64), and every all-reduce ran in the second micro-step's backward."""
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(WORKER), str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    _, whole_grads = whole_batch_gradients(whole_batch())
    for rank in ranks:
        assert largest_difference(rank["grads"], whole_grads) <= 1e-10
        assert rank["synced_on"] and set(rank["synced_on"]) == {2}


def test_a_run_with_grad_accum_trains_as_the_run_without(cli, tmp_path):
    """The same batches, split in 4: the losses agree to float32 rounding, and config.json keeps the setting."""
    assert cli(*TINY, "--out", tmp_path / "one").code == 0
    assert cli(*TINY, "--set", "grad_accum=4", "--out", tmp_path / "four").code == 0
    one, four = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "four")
    assert [r["step"] for r in one] == [r["step"] for r in four]
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(one, four, strict=True)) < 1e-5
    config = json.loads((tmp_path / "four" / RunLayout.CONFIG).read_text())
    assert config["train"]["grad_accum"] == 4


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "grad_accum must be positive, got 0"),
        ("-1", "grad_accum must be positive, got -1"),
        ("nan", "grad_accum must be an integer, got 'nan'"),
        ("1.5", "grad_accum must be an integer, got '1.5'"),
        ("3", "batch_size (32) must be a multiple of grad_accum (3)"),
    ],
)
def test_bad_grad_accum_is_one_line_and_nothing_is_written(cli, tmp_path, value, message):
    assert_one_line_error(cli(*TINY, "--set", f"grad_accum={value}", "--out", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()
