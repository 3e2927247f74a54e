"""The training loop: AdamW with warmup and cosine decay, periodic evaluation, atomic checkpoints,
clean stops on Ctrl-C and on a non-finite loss, and bit-identical resumes."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from gpt_core import GPT
from gpt_tasks import Task
from gpt_train.checkpoint import CHECKPOINT_NAME, TrainingState, load_checkpoint, load_weights, save_checkpoint
from gpt_train.config import RunConfig, TrainSettings
from gpt_train.distributed import Rank
from gpt_train.errors import UserError

METRICS_NAME = "metrics.jsonl"
FINAL_NAME = "final.json"
INTERRUPTED_EXIT = 130
DIVERGED_EXIT = 1


def learning_rate(step: int, s: TrainSettings) -> float:
    """Linear warmup to lr, then cosine decay to min_lr at the last step (or constant)."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    if s.schedule == "constant":
        return s.lr
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: GPT, s: TrainSettings) -> torch.optim.AdamW:
    """AdamW with weight decay on weight matrices only: not on norms and biases (vectors), and not on
    the position table unless asked, since shrinking it towards zero erases position information."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        is_position_table = name.startswith("wpe.")
        wants_decay = param.dim() >= 2 and (s.decay_position_embedding or not is_position_table)
        (decay if wants_decay else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # one fused kernel for every parameter: ~4x faster than the per-tensor loop on CPU
        return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2), fused=True)
    except RuntimeError:  # a device (or an older PyTorch) without the fused kernel
        return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2))


def evaluate_splits(task: Task, model: GPT, device: torch.device, splits, limit: int | None) -> dict[str, float]:
    """Every metric of every split, named `<split>_<metric>`."""
    metrics = {}
    for split in splits:
        metrics |= {f"{split}_{name}": value for name, value in task.evaluate(model, split, device, limit).items()}
    return metrics


def check_compiler(device: torch.device) -> None:
    """torch.compile's backends need a toolchain: a C++ compiler on CPU, Triton on CUDA."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        raise UserError("--compile on CPU needs a C++ compiler (g++ or clang++); install one or drop --compile")
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        raise UserError("--compile on CUDA needs Triton (pip install triton); install it or drop --compile")


class StopRequest:
    """Turns SIGINT into a flag the loop checks between steps, so a stop never tears a step in half."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        def handler(signum, frame):
            self.requested = True

        try:
            previous = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: leave signals alone
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


class MetricsLog:
    """metrics.jsonl: one JSON object per logged step. On resume, lines past the checkpoint are dropped
    so the file reads as if the run had never stopped."""

    def __init__(self, path: Path, resume_step: int | None):
        self.path = path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")


class Trainer:
    def __init__(
        self,
        config: RunConfig,
        task: Task,
        run_dir: Path,
        device: torch.device,
        rank: Rank | None = None,
        quiet: bool = False,
        resume: bool = False,
        on_step: Callable[[int], None] | None = None,
    ):
        self.config, self.task, self.run_dir, self.device = config, task, run_dir, device
        self.rank = rank = rank or Rank()
        self.settings = config.train
        self.quiet = quiet or not rank.is_main
        self.on_step = on_step
        self.stop = StopRequest()
        torch.manual_seed(self.settings.seed)
        self.model = GPT(config.model).to(device)
        self.optimizer = make_optimizer(self.model, self.settings)
        self.data_rng = torch.Generator()
        self.step, self.elapsed_before = 0, 0.0
        if resume:
            self._restore(load_checkpoint(run_dir / CHECKPOINT_NAME, config.task))
        self.first_step = self.step  # where this process started: compilation happens on its first step
        self.metrics = MetricsLog(run_dir / METRICS_NAME, self.step if resume else None) if rank.is_main else None
        self.forward = self._training_forward()

    # state ---------------------------------------------------------------------------------
    def _restore(self, state: TrainingState) -> None:
        load_weights(self.model, state.model)
        try:
            self.optimizer.load_state_dict(state.optimizer)
        except (ValueError, KeyError) as error:
            raise UserError(f"checkpoint's optimiser state does not match this run ({error})") from None
        torch.set_rng_state(state.rng["cpu"])
        if self.device.type == "cuda" and "cuda" in state.rng:
            torch.cuda.set_rng_state(state.rng["cuda"], self.device)
        self.step, self.elapsed_before = state.step, state.elapsed

    def _state(self, elapsed: float) -> TrainingState:
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        model = {name: p for name, p in self.model.named_parameters()}
        return TrainingState(self.config.task, self.step, elapsed, model, self.optimizer.state_dict(), rng)

    def save(self, elapsed: float) -> None:
        if self.rank.is_main:
            save_checkpoint(self.run_dir / CHECKPOINT_NAME, self._state(elapsed))

    # the loop ------------------------------------------------------------------------------
    def _training_forward(self):
        module: torch.nn.Module = self.model
        if self.rank.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            module = DistributedDataParallel(self.model, device_ids=device_ids)
        if self.settings.compile:
            check_compiler(self.device)
            module = torch.compile(module)
        return module

    def _batch_seed(self, step: int) -> int:
        """Each (seed, rank, step) draws its own batch: ranks see different data, and a resumed run
        draws exactly the batches the uninterrupted one would have, with no generator state to save."""
        return ((self.settings.seed * 1_000_003 + self.rank.rank) * 1_000_000_007 + step) % 2**63

    def _train_step(self, step: int) -> tuple[float, bool]:
        """One optimiser step; returns the (rank-averaged) loss and whether a stop was requested."""
        s = self.settings
        lr = learning_rate(step, s)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.data_rng.manual_seed(self._batch_seed(step))
        batch = self.task.batch(s.batch_size, self.data_rng).to(self.device)
        _, loss = self.forward(batch.inputs, batch.targets)
        loss_value, stop = self.rank.mean_and_any(loss.item(), self.stop.requested, self.device)
        if not math.isfinite(loss_value):
            return loss_value, stop
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if s.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
        self.optimizer.step()
        return loss_value, stop

    def _first_step_checked(self, step: int) -> tuple[float, bool]:
        """A train step; on the first one under --compile (where compilation happens, forward and
        backward) a compiler failure becomes a one-line error instead of a traceback."""
        if not (self.settings.compile and step == self.first_step):
            return self._train_step(step)
        try:
            return self._train_step(step)
        except Exception as error:
            text = str(error).strip()
            raise UserError(f"torch.compile failed: {text.splitlines()[0] if text else type(error).__name__}") from None

    def _evaluate(self, limit: int | None, splits) -> dict[str, float]:
        metrics = {}
        if self.rank.is_main:
            metrics = evaluate_splits(self.task, self.model, self.device, splits, limit)
        self.rank.barrier()
        return metrics

    def run(self) -> dict[str, Any]:
        """Train to the configured number of steps; returns the final metrics."""
        s = self.settings
        if self.step >= s.steps:
            raise UserError(f"the run in {self.run_dir} already finished ({self.step} of {s.steps} steps)")
        start = time.perf_counter()
        elapsed = lambda: self.elapsed_before + time.perf_counter() - start
        bar = tqdm(total=s.steps, initial=self.step, disable=self.quiet, desc=self.config.task, dynamic_ncols=True)
        primary = self.config.primary_metric
        latest: dict[str, float] = {}
        self.model.train()
        with self.stop.installed(), bar:
            while self.step < s.steps:
                loss, stop_requested = self._first_step_checked(self.step)
                if not math.isfinite(loss):
                    self._diverged(loss)
                self.step += 1
                if self.on_step is not None:
                    self.on_step(self.step)
                evaluated = self.step % s.eval_every == 0 and self.step < s.steps
                if evaluated:
                    latest = self._evaluate(s.eval_limit, self.config.eval_splits)
                if evaluated or (self.step % s.log_every == 0 and self.step < s.steps):
                    lr = self.optimizer.param_groups[0]["lr"]
                    record = {"step": self.step, "elapsed": round(elapsed(), 3), "loss": loss, "lr": lr}
                    self._log(record | (latest if evaluated else {}))
                bar.update(1)
                bar.set_postfix(
                    {"loss": f"{loss:.4f}"} | ({primary: f"{latest[primary]:.4f}"} if primary in latest else {})
                )
                if self.step % s.checkpoint_every == 0:
                    self.save(elapsed())
                if (stop_requested or self.stop.requested) and self.step < s.steps:
                    self.save(elapsed())
                    raise UserError(self._interrupted_message(), exit_code=INTERRUPTED_EXIT)
        final = self._evaluate(s.final_eval_limit, self.config.eval_splits)
        total = elapsed()
        self.save(total)
        final |= {"step": self.step, "elapsed": round(total, 3), "loss": loss}
        final |= self._weights_agreement()
        if self.rank.is_main:
            self._log(final | {"lr": self.optimizer.param_groups[0]["lr"]})
            (self.run_dir / FINAL_NAME).write_text(json.dumps(final, indent=2) + "\n")
        return final

    def _log(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.write(record)

    def _weights_agreement(self) -> dict[str, Any]:
        """Under torchrun: a checksum of every rank's weights, so agreement is on the record."""
        if not self.rank.distributed:
            return {}
        checksum = sum(float(p.double().sum()) for p in self.model.parameters())
        return {
            "world_size": self.rank.world_size,
            "rank_weight_checksums": self.rank.gather_floats(checksum, self.device),
        }

    def _diverged(self, loss: float) -> None:
        checkpoint = self.run_dir / CHECKPOINT_NAME
        kept = f"the last good checkpoint is {checkpoint}" if checkpoint.exists() else "no checkpoint was written yet"
        raise UserError(f"loss became {loss} at step {self.step + 1}; stopped ({kept})", exit_code=DIVERGED_EXIT)

    def _interrupted_message(self) -> str:
        return (
            f"interrupted at step {self.step}; checkpoint written. Resume with: gpt-train run --resume {self.run_dir}"
        )
