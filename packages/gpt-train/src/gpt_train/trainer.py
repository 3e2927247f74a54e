"""The training loop: draw a batch, take a step, now and then evaluate and checkpoint. `train(run)` is a whole
training process; it returns how the run ended, which the CLI alone turns into a message and an exit status."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable
from copy import deepcopy
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from torch.nn.parallel import DistributedDataParallel

from gpt_core import GPT, IGNORE_INDEX, KERNEL_SETS, Kernels, to_device
from gpt_core.compiling import compiled
from gpt_core.testing.verification import dropout_report
from gpt_tasks import Batch, Task, measure_probes
from gpt_train.accumulation import accumulate_gradients
from gpt_train.checkpoint import TrainingState, load_weights
from gpt_train.compiling import (
    COMPILED_STEP_TOLERANCE,
    CompileError,
    Step,
    check_compiled_step,
    check_compiler,
    compile_off,
    compiler_failures_explained,
    step_disagreement,
)
from gpt_train.config import RunConfig
from gpt_train.distributed import DistributedError, Unread, lost_a_rank
from gpt_train.errors import TrainError
from gpt_train.grokfast import Grokfast
from gpt_train.guard import KernelExit, KernelFailure
from gpt_train.hf import read_weights
from gpt_train.kernels import KernelError
from gpt_train.optimisation import Optimizer, learning_rate, make_optimizer
from gpt_train.pictures import draw_pictures, write_attention
from gpt_train.precision import MAX_SKIPPED_STEPS, Precision, float32_matmuls, full_float32
from gpt_train.progress import Progress, evaluation_progress
from gpt_train.record import Record, finished_at
from gpt_train.runs import Run, RunDirError, RunWarning, run_kernels
from gpt_train.signals import StopRequest, ctrl_c_interrupts
from gpt_train.verify import torch_references
from gpt_viz import RunLayout, metric_key, probe_key

T = TypeVar("T")

DROPOUT_CHECK_TOLERANCE = 1e-2
"""The largest difference accepted in the dropout checks a run with the triton set or --compile makes on its device
before training (float32, the weights at most 1): TF32 products, which the run's float32 training uses, round them
by up to 2^-11 each; a mask that differs between forward and backward moves a gradient by the order of the
gradient."""

Taken = tuple[Unread, Unread | None]  # a step queued: its loss (and stop flag), fp16's steps skipped in a row


@dataclass(frozen=True)
class Outcome:
    """How a run ended: the final metrics of a finished run, or what happened to one that stopped early."""

    reason: Literal["finished", "interrupted", "diverged"]
    step: int
    final: dict[str, Any] = field(default_factory=dict)
    detail: str = ""
    pictures_problem: str | None = None


def initial_model(
    config: RunConfig, device: torch.device | str = "cpu", pretrained: bool = True, kernels: Kernels | None = None
) -> GPT:
    """The model a run starts from, seeded by its settings alone so step 0 can be rebuilt from config.json; from
    `init_from`'s weights when `pretrained`."""
    if kernels is None:
        kernels = run_kernels(config)  # found before the seed: a kernel plugin imported now cannot shift the draws
    torch.manual_seed(config.train.seed)
    model = GPT(config.model, kernels)
    if config.init_from and pretrained:
        load_weights(model, read_weights(Path(config.init_from), model.config))
    return model.to(device)


class MetricsError(TrainError):
    """A task's `evaluate` that returns what the contract does not: its primary metric, plain numbers."""


def checked_metrics(task: Task, metrics: Any) -> dict[str, float]:
    """`evaluate`'s dict, checked at once: a missing primary metric surfaced only after the whole run had trained."""
    what = f"task {task.name!r}: evaluate() returned"
    if not isinstance(metrics, dict) or task.primary_metric not in metrics:
        keys = ", ".join(map(str, metrics)) if isinstance(metrics, dict) else type(metrics).__name__
        raise MetricsError(f"{what} no primary metric {task.primary_metric!r} (got: {keys})")
    wrong = [key for key, value in metrics.items() if not isinstance(value, (int, float)) or isinstance(value, bool)]
    if wrong:
        raise MetricsError(f"{what} {wrong[0]} as a {type(metrics[wrong[0]]).__name__}; metrics are Python numbers")
    return metrics


class BatchError(TrainError):
    """A task's `batch` that returns what the contract does not: a Batch of (B, T) token ids the model can read."""


def checked_batch(task: Task, batch: Any) -> Batch:
    """`batch()`'s Batch, checked at a run's first step (on the host, where batches are made): a wrong one failed
    deep in the model, with a traceback, or (longer than the block, with rope) trained on what the task never asks."""
    what = f"task {task.name!r}: batch() returned"
    if not isinstance(batch, Batch):
        raise BatchError(f"{what} a {type(batch).__name__}, not a gpt_tasks.Batch")
    for name in ("inputs", "targets"):
        ids = getattr(batch, name)
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 2:
            got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise BatchError(f"{what} {name} as {got}; a Batch holds (B, T) token ids, int64 (or int32)")
    shape, (B, T) = tuple(batch.targets.shape), batch.inputs.shape
    if shape != (B, T) or not (B >= 1 and 1 <= T <= task.block_size):
        raise BatchError(
            f"{what} inputs {(B, T)} and targets {shape}: the same (B, T), B >= 1 and T from 1 to the task's "
            f"block_size {task.block_size}"
        )
    scored = batch.targets[batch.targets != IGNORE_INDEX]
    for name, ids in (("input", batch.inputs), ("target", scored)):
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < task.vocab_size:
            raise BatchError(
                f"{what} {name} ids from {int(ids.min())} to {int(ids.max())}; the vocabulary has 0 to "
                f"{task.vocab_size - 1}" + (f" (and {IGNORE_INDEX} for an unscored target)" if name == "target" else "")
            )
    return batch


def evaluate_splits(task: Task, model: GPT, device: torch.device, splits, limit: int | None) -> dict[str, float]:
    scores = {split: checked_metrics(task, task.evaluate(model, split, device, limit)) for split in splits}
    return {metric_key(split, name): value for split, metrics in scores.items() for name, value in metrics.items()}


# the loop ------------------------------------------------------------------------------------
class Trainer:
    """The model, its optimiser and the loop over steps of one run."""

    def __init__(self, run: Run, quiet: bool = False, on_step: Callable[[int], None] | None = None):
        self.config, self.task, self.device, self.rank = run.config, run.task, run.device, run.rank
        self.settings = run.config.train
        self.quiet = quiet or not run.rank.is_main
        self.on_step = on_step  # called after each step, its loss read (self.loss): how a test stops a run
        self.stop = StopRequest(say=None if self.quiet else Progress.note)
        self.record = Record(run)
        self.continuing = run.continuing  # opened by --resume: how the user turns compiling off
        self.model = initial_model(run.config, run.device, pretrained=not run.resume, kernels=run.kernels)
        s = self.settings
        self.optimizer = make_optimizer(self.model, s)
        self.precision = Precision.for_run(s.dtype, run.device)
        self.grokfast = Grokfast(s.grokfast_alpha, s.grokfast_lambda) if s.grokfast_lambda > 0 else None
        self.data_rng = torch.Generator()
        self.step, self.elapsed_before = 0, 0.0
        self.saved_step: int | None = None  # the step of the checkpoint on disk, from this process or the one resumed
        self.cooldown_from: int | None = None  # the step whose evaluation reached `cooldown_trigger`
        self.loss: float | None = None  # the last step's training loss (a checkpoint's, before this process trains)
        if run.resume:
            self._restore(self.record.restore())
        if self.step > self.last_step:  # config.json edited since: "finishing" would report steps it does not set
            raise RunDirError(self._past_the_last_step(run.layout))
        if self.step >= self.last_step and finished_at(run.layout, self.step):
            raise RunDirError(f"the run in {run.layout.root} already finished ({self.step} of {self.last_step} steps)")
        self.record.start_at(self.step, final_only=self.step >= self.last_step)
        if self.step == 0:
            self.keep_snapshot()
        self.first_step = self.step  # where this process started
        self.ddp: DistributedDataParallel | None = None
        self.forward = self._training_forward()

    # state ---------------------------------------------------------------------------------
    def _restore(self, state: TrainingState) -> None:
        load_weights(self.model, state.model)
        _check_optimiser_state(state.optimizer, self.optimizer)
        parts = {"optimiser": lambda: self.optimizer.load_state_dict(state.optimizer)}
        if self.grokfast is not None:
            parts["Grokfast"] = lambda: self.grokfast.load_state_dict(state.grokfast, self.model)
        parts["loss-scaling"] = lambda: self.precision.load_state_dict(state.precision)
        for part, restore in parts.items():
            try:
                restore()
            except (ValueError, KeyError) as error:
                raise RunDirError(f"checkpoint's {part} state does not match this run ({error})") from None
        if "cpu" not in state.rng:
            raise RunDirError("checkpoint holds no random generator state (rng/cpu): it cannot be resumed")
        torch.set_rng_state(state.rng["cpu"])  # its size is checked on load
        if self.device.type == "cuda" and "cuda" in state.rng:
            try:
                torch.cuda.set_rng_state(state.rng["cuda"], self.device)
            except RuntimeError as error:
                raise RunDirError(f"checkpoint's CUDA generator state does not fit this device ({error})") from None
        if self.device.type == "mps" and "mps" in state.rng:  # dropout's and randomized positions' draws there
            try:
                torch.mps.set_rng_state(state.rng["mps"])
            except RuntimeError as error:
                raise RunDirError(f"checkpoint's MPS generator state does not fit this device ({error})") from None
        self.step, self.elapsed_before, self.cooldown_from = state.step, state.elapsed, state.cooldown_from
        self.saved_step = state.step
        self.loss = state.loss
        if state.world_size not in (None, self.rank.world_size) and self.step < self.last_step:
            warnings.warn(
                f"the checkpoint was written by a run of {state.world_size} process(es), this one has "
                f"{self.rank.world_size}: each step now averages {self.rank.world_size} x batch_size sequences, not "
                f"{state.world_size} x, and the batches differ from the uninterrupted run's",
                RunWarning,
                stacklevel=2,
            )
        threads = torch.get_num_threads()
        if self.device.type == "cpu" and state.threads not in (None, threads) and self.step < self.last_step:
            warnings.warn(
                f"the checkpoint was written with {state.threads} CPU thread(s), this process has {threads}: its sums "
                f"add up in another order, so from here the numbers differ from the uninterrupted run's in their last "
                f"digits (OMP_NUM_THREADS={state.threads} matches it)",
                RunWarning,
                stacklevel=2,
            )

    def _past_the_last_step(self, layout: RunLayout) -> str:
        s = self.settings
        if self.last_step == s.steps:
            ends, fix = f"train.steps is {s.steps}", f"set train.steps to {self.step} or more"
        else:
            ends = f"cooldown_steps is {s.cooldown_steps} after the cooldown began at step {self.cooldown_from}"
            fix = f"set train.cooldown_steps to {self.step - self.cooldown_from} or more"
        return (
            f"cannot resume {layout.root}: its checkpoint is at step {self.step}, past the run's last step "
            f"{self.last_step} ({ends} in {layout.config.name}); {fix} to go on from it"
        )

    @property
    def last_step(self) -> int:
        return self.settings.last_step(self.cooldown_from)

    def save(self, elapsed: float) -> None:
        self.record.checkpoint(lambda: self._state(elapsed))
        self.saved_step = self.step

    def _state(self, elapsed: float) -> TrainingState:
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        if self.device.type == "mps":
            rng["mps"] = torch.mps.get_rng_state()
        model, optimizer = dict(self.model.named_parameters()), self.optimizer.state_dict()
        grokfast = self.grokfast.state_dict() if self.grokfast is not None else {}
        precision = self.precision.state_dict()
        return TrainingState(
            self.config.task, self.step, elapsed, model, optimizer, rng, grokfast, precision, self.cooldown_from,
            self.loss, self.rank.world_size, torch.get_num_threads() if self.device.type == "cpu" else None,
            asdict(self.config.model),
        )  # fmt: skip

    def keep_snapshot(self) -> None:
        every = self.settings.snapshot_every
        if every and self.step % every == 0:
            self.record.snapshot(self.step, dict(self.model.named_parameters()))

    # one step ------------------------------------------------------------------------------
    def _training_forward(self) -> torch.nn.Module:
        module: torch.nn.Module = self.model
        if self.rank.distributed:
            # device_ids=None: DDP copies no argument to the GPU, so the read mask stays on the host (the batches
            # arrive on the device already)
            module = self.ddp = DistributedDataParallel(self.model, device_ids=None)
        if self.settings.compile:
            check_compiler(self.device, self.continuing)
            module = compiled(module)
        return module

    def draw_batch(self, step: int):
        """Each (seed, rank, step) draws its own batch: ranks see different data, and a resumed run draws exactly
        the batches the uninterrupted one would have, with no generator state to save. Under torchrun the global
        generator (dropout's masks, randomized positions) is seeded so too: each rank draws its own masks."""
        seed = ((self.settings.seed * 1_000_003 + self.rank.rank) * 1_000_000_007 + step) % 2**63
        self.data_rng.manual_seed(seed)
        if self.rank.distributed:
            torch.manual_seed(seed ^ 1 << 62)  # another stream than any step's batch; all ranks began on one seed
        return self.task.batch(self.settings.batch_size, self.data_rng)  # on the host: `_gradients` copies it

    def train_step(self, step: int) -> Taken:
        """One optimiser step, queued on the device: its loss on its way to the host, under torchrun summed over the
        ranks beside how many asked to stop (`Rank.read` gives the mean and the verdict), and fp16's count of steps
        skipped in a row. A non-finite loss spoils the weights in memory: the loop stops at it before it saves or
        evaluates (one more step may be queued)."""
        s = self.settings
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(step, s, self.cooldown_from)
        batch = self.draw_batch(step)
        if step == self.first_step:
            checked_batch(self.task, batch)
        self.optimizer.zero_grad()
        if s.kernels == "triton" and step == self.first_step and self.model.kernels is not KERNEL_SETS["fast"]:
            self._check_triton_step(batch)
        if s.compile and step == self.first_step:  # compilation happens on a process's first step
            loss = compiler_failures_explained(lambda: self._checked_compiled_step(batch))
        else:
            loss = self._gradients(batch, self.forward)
        reduced = self.rank.reduced(loss, self.stop.requested, self.device)
        finite = self.precision.unscale(self.optimizer, self.model.parameters())
        # Filtered before clipping (the clip bounds the step actually taken), and only finite gradients: under fp16
        # Grokfast reads the verdict from the device.
        if self.grokfast is not None and bool(finite):
            self.grokfast.apply(self.model)
        if s.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
        return reduced, self.precision.step(self.optimizer, finite)

    def _gradients(self, batch, module: torch.nn.Module, precision: Precision | None = None) -> torch.Tensor:
        """The batch's mean loss over its scored targets through `module`, its gradients added to .grad."""
        no_sync = self.ddp.no_sync if self.ddp is not None else None
        compiled = self.settings.compile  # a compiled graph takes its inputs on one device; eager reads on the host
        loss_of = lambda inputs, targets, read: (
            module(inputs, targets, read=to_device(read, inputs.device) if compiled else read).loss
        )
        n, precision = self.settings.grad_accum, precision or self.precision
        return accumulate_gradients(loss_of, batch, n, precision, self.device, no_sync)

    def _checked_compiled_step(self, batch) -> torch.Tensor:
        """The first compiled step, once it agrees with an eager one on the same batch and weights (else CompileError).
        A model that draws at random (dropout, randomized positions) is checked in eval mode, and its dropout,
        compiled, by what holds for any draw."""
        draws = self.config.model.dropout > 0 or self.config.model.randomized_positions
        self.model.train(not draws)
        try:
            exact = self._float64_step(batch)
            eager = self._step(batch, self.ddp if self.ddp is not None else self.model)  # without the compiler
            loss = self._gradients(batch, self.forward)
            grads = {name: p.grad for name, p in self.model.named_parameters() if p.grad is not None}
            tolerance = COMPILED_STEP_TOLERANCE[self.settings.dtype]
            compiled_step = Step(float(loss), grads)
            problem = check_compiled_step(
                eager, compiled_step, tolerance, exact, self.settings.kernels, self.continuing
            )
        finally:
            self.model.train()
        if problem is None and self.config.model.dropout > 0 and (failure := self._dropout_failure(True)) is not None:
            problem = (
                f"--compile: its dropout fails a check that holds for any draw: {failure}; the compiler computes "
                f"this model's dropout wrong here, so the run stopped before training ({compile_off(self.continuing)})"
            )
        _, anywhere = self.rank.mean_and_any(0.0, problem is not None, self.device)
        if anywhere:
            raise CompileError(problem or "--compile: another rank's compiled first step disagrees with its eager one")
        if draws:  # the step itself, with the training mode's draws
            self.optimizer.zero_grad()
            loss = self._gradients(batch, self.forward)
        return loss

    def _check_triton_step(self, batch) -> None:
        """The triton set's first step against the fast set's (else KernelError): Triton compiles for this very GPU,
        which no test here has run. A model that draws at random is checked in eval mode, and its dropout kernels
        (which draw masks of their own) by what holds for any draw, in float32 on the device."""
        draws = self.config.model.dropout > 0 or self.config.model.randomized_positions
        with torch.random.fork_rng(devices=[]):  # its initial draws would shift a resumed run's dropout masks
            fast = GPT(self.config.model, KERNEL_SETS["fast"]).to(self.device)
        fast.load_state_dict(self.model.state_dict())
        fast.train(not draws)
        self.model.train(not draws)
        try:
            ours = self._step(batch, self.model)
            loss = float(self._gradients(batch, fast))
            theirs = Step(loss, {name: p.grad for name, p in fast.named_parameters() if p.grad is not None})
        finally:
            self.model.train()
        problem = step_disagreement(theirs, ours, COMPILED_STEP_TOLERANCE[self.settings.dtype])
        if problem is not None:
            problem = f"the first step disagrees with the fast set's on the same batch and weights: {problem}"
        elif self.config.model.dropout > 0 and (failure := self._dropout_failure()) is not None:
            problem = f"its dropout, checked on the device by what holds for any draw: {failure}"
        _, anywhere = self.rank.mean_and_any(0.0, problem is not None, self.device)
        if anywhere:
            raise KernelError(
                f"--kernels triton: {problem or 'the first-step check failed on another rank'}; Triton's kernels "
                "fail this model on this GPU, so the run stopped before training (use --kernels fast, and please "
                "report it)"
            )

    def _dropout_failure(self, compile: bool = False) -> str | None:
        """How the model's kernels' dropout (compiled, with `compile`) fails a check that holds for any draw, on the
        device, or None; the CPU's and the device's generators are left as they were: the run's masks come from them."""
        devices = [self.device] if self.device.type in ("cuda", "mps") else []  # torch.manual_seed reseeds both
        with torch.random.fork_rng(devices=devices, device_type=self.device.type):
            rows = dropout_report(self.model.kernels, torch_references(), self.device, seed=0, compile=compile)
        failures = [failure for row in rows if (failure := row.failure(DROPOUT_CHECK_TOLERANCE))]
        return failures[0] if failures else None

    def _step(self, batch, module: torch.nn.Module) -> Step:
        loss = float(self._gradients(batch, module))
        grads = {name: p.grad.clone() for name, p in self.model.named_parameters() if p.grad is not None}
        self.optimizer.zero_grad()
        return Step(loss, grads)

    def _float64_step(self, batch) -> Step | None:
        """The eager step in float64 on a copy, measuring the eager step's own rounding (times fp16's loss scale);
        None without float64 (MPS, a kernel) or under torchrun, whose gradients a local copy's are not."""
        if self.rank.distributed or self.device.type == "mps":
            return None
        wide = deepcopy(self.model).double()
        try:
            loss = self._gradients(batch, wide, Precision("fp32", self.device))
        except Exception:  # the check then holds the compiled step to the tolerance alone
            return None
        scale = self.precision.scale or 1.0
        grads = {name: p.grad * scale for name, p in wide.named_parameters() if p.grad is not None}
        return Step(float(loss), grads)

    def scored_model(self) -> Any:
        """What gives the logits the evaluation scores: the run's model (`learn train`: the learner's GPT)."""
        return self.model

    def evaluate(self, limit: int | None) -> dict[str, float]:
        """Every split's metrics and the probes, eagerly in full float32: the numbers `gpt-train eval` gives later."""
        metrics = {}
        if self.rank.is_main:
            with full_float32():
                metrics = evaluate_splits(self.task, self.scored_model(), self.device, self.config.eval_splits, limit)
                probes = measure_probes(self.task, self.model, self.device)  # through gpt-core's hooks
            metrics |= {probe_key(name): value for name, value in probes.items()}
        self.rank.barrier()
        return metrics

    # the run -------------------------------------------------------------------------------
    def run(self) -> Outcome:
        s = self.settings
        start = time.perf_counter()
        elapsed = lambda: self.elapsed_before + time.perf_counter() - start
        progress = Progress(self.config, self.step, self.quiet)
        if self.last_step != s.steps:  # a resumed run whose cool-down has started
            progress.ends_at(self.last_step)
        latest: dict[str, float] = {}
        self.model.train()
        cuda = self.device.type == "cuda"  # `tf32` is CUDA's; a CPU run leaves the setting as it finds it
        matmuls = float32_matmuls("high" if s.tf32 else "highest") if cuda else contextlib.nullcontext()
        pending: list[Taken] = []  # the steps taken and not yet read
        stopping = False
        try:
            with self.stop.installed(), matmuls:
                while self.step < self.last_step:
                    if not stopping:
                        taken = self.step + len(pending)
                        pending.append(self._computing(f"step {taken + 1}", partial(self.train_step, taken)))
                    # A step's loss is read once the next step is queued (on CUDA the read waits for that step
                    # alone, the GPU running the next one meanwhile), unless the loop acts on that step at once.
                    late = 0 if stopping or self._acts_at(self.step + len(pending)) else 1
                    ready, pending = pending[: len(pending) - late], pending[len(pending) - late :]
                    read = self._computing(f"step {self.step + 1}", partial(self._read, ready))
                    for loss, stop_requested, skipped in read:
                        if not math.isfinite(loss):
                            return self._diverged(f"loss became {loss}")
                        if skipped >= MAX_SKIPPED_STEPS:
                            return self._diverged(
                                f"gradients were not finite for {MAX_SKIPPED_STEPS} steps in a row "
                                f"(fp16 loss scale down to {self.precision.scale:.1e})"
                            )
                        self.step, self.loss = self.step + 1, loss
                        latest = self._after_step(loss, latest, progress, elapsed)
                        stopping |= stop_requested  # under torchrun: every rank's agreed flag
                    # Under torchrun only the agreed flag: a Ctrl-C during the exchange goes in the next one.
                    stopping |= self.stop.requested and not self.rank.distributed
                    if stopping and not pending and self.step < self.last_step:
                        self.save(elapsed())
                        return Outcome("interrupted", self.step, detail="checkpoint written")
        except KeyboardInterrupt:  # a second Ctrl-C: the steps in progress are dropped, the checkpoint on disk kept
            detail = f"stopped at once; the checkpoint of step {self.saved_step} is kept"
            if self.saved_step is None:
                detail = "stopped at once, before its first checkpoint: --resume starts it again from step 0"
            return Outcome("interrupted", self.step, detail=detail)
        finally:
            progress.close()
        return self._finish(elapsed)

    def _acts_at(self, step: int) -> bool:
        """Whether the loop acts on `step` as soon as it is taken (logs, evaluates, saves, stops, or calls `on_step`),
        so reads its loss at once. Under torchrun every rank reads at the same steps: a rank's own Ctrl-C waits for
        the exchange."""
        s = self.settings
        every = (s.log_every, s.checkpoint_every, s.snapshot_every)
        return (
            step >= self.last_step
            or s.evaluates_at(step)
            or any(n and step % n == 0 for n in every)
            or self.on_step is not None
            or (self.stop.requested and not self.rank.distributed)
        )

    def _read(self, taken: list[Taken]) -> list[tuple[float, bool, int]]:
        """Each step's loss and stop verdict (`Rank.read`) beside fp16's steps skipped in a row (0 without it)."""
        read = self.rank.read([reduced for reduced, _ in taken])
        skipped = [0 if count is None else count.read() for _, count in taken]
        return [(loss, stop, n) for (loss, stop), n in zip(read, skipped, strict=True)]

    def _after_step(
        self, loss: float, latest: dict[str, float], progress: Progress, elapsed: Callable[[], float]
    ) -> dict[str, float]:
        """What follows step `self.step` once its loss is read: the snapshot, evaluation, metrics line, progress bar
        and checkpoint due at it; the latest evaluation's metrics."""
        s = self.settings
        if self.on_step is not None:
            self.on_step(self.step)
        self.keep_snapshot()
        evaluated = s.evaluates_at(self.step) and self.step < self.last_step
        if evaluated:
            latest = self._evaluating(f"the evaluation at step {self.step}", s.eval_limit, elapsed)
            self._follow_cooldown_trigger(latest, progress)
        if evaluated or (self.step % s.log_every == 0 and self.step < self.last_step):
            lr = self.optimizer.param_groups[0]["lr"]
            line = {"step": self.step, "elapsed": round(elapsed(), 3), "loss": loss, "lr": lr}
            self.record.log(line | (latest if evaluated else {}))
        progress.update(loss, latest)
        if self.step % s.checkpoint_every == 0 and self.step < self.last_step:  # the last: with final.json
            self.save(elapsed())
        return latest

    def _follow_cooldown_trigger(self, metrics: dict[str, float], progress: Progress) -> None:
        """Start the cool-down at the first evaluation reaching `cooldown_trigger`, end it at one below; every rank
        takes rank 0's verdict."""
        trigger = self.settings.cooldown_trigger
        if trigger <= 0:
            return
        value = metrics.get(self.config.primary_metric, math.nan)  # NaN, or none on this rank: not reached
        reached = value >= trigger if self.config.higher_is_better else value <= trigger
        _, reached = self.rank.mean_and_any(0.0, reached, self.device)  # the other ranks have no metrics: False
        if (self.cooldown_from is None) == reached:
            self.cooldown_from = self.step if reached else None
            progress.ends_at(self.last_step)

    def _finish(self, elapsed: Callable[[], float]) -> Outcome:
        """The final evaluation and the attention arrays, then the last checkpoint and final.json (a finished run has
        them all). Ctrl-C before final.json writes the last step's checkpoint, from which --resume only evaluates."""
        try:
            with ctrl_c_interrupts():  # SIGTERM too, which killed the run here, its last steps unsaved
                with evaluation_progress(self.quiet):
                    final = self._evaluating("the final evaluation", self.settings.final_eval_limit, elapsed)
                layout = self.record.layout
                self.record.check_in_place()  # after a long final evaluation, before writing by name again
                problem = write_attention(self.task, self.model, self.device, layout) if self.record.active else None
        except KeyboardInterrupt:
            self.save(elapsed())
            return Outcome("interrupted", self.step, detail="checkpoint written; the final evaluation is still to do")
        total = elapsed()
        self.save(total)
        final |= {"step": self.step, "elapsed": round(total, 3), "loss": self.loss}
        self.record.log(final | {"lr": self.optimizer.param_groups[0]["lr"]})
        final |= self._weights_agreement()  # bookkeeping for final.json, not a metric to plot
        self.record.finish(final)
        return Outcome("finished", self.step, final=final, pictures_problem=problem)

    def _weights_agreement(self) -> dict[str, Any]:
        """Under torchrun: a checksum of every rank's weights, so agreement is on the record."""
        if not self.rank.distributed:
            return {}
        with torch.no_grad():
            checksum = sum(float(p.cpu().double().sum()) for p in self.model.parameters())
        checksums = self.rank.gather_floats(checksum, self.device)
        return {"world_size": self.rank.world_size, "rank_weight_checksums": checksums}

    def _diverged(self, what: str) -> Outcome:
        detail = f"{what} at step {self.step + 1}; stopped ({self.record.last_checkpoint()})"
        return Outcome("diverged", self.step, detail=detail)

    def _evaluating(self, what: str, limit: int | None, elapsed: Callable[[], float]) -> dict[str, float]:
        """An evaluation. Whatever it raises (a task's own error, memory), the steps trained so far are written first:
        an evaluation changes no weight, so the checkpoint is the model as trained, and --resume goes on from it."""

        def keep_the_steps() -> None:
            if self.saved_step != self.step:
                self.save(elapsed())

        return self._computing(what, lambda: self.evaluate(limit), keep_the_steps)

    def _computing(self, what: str, work: Callable[[], T], on_error: Callable[[], None] = lambda: None) -> T:
        """Run `work` (a step, an evaluation), and `on_error` if it raises; with chosen kernels, a foreign error from
        it is a KernelFailure naming them and `what`. Without them an error is gpt-core's or gpt-train's own, or a
        task's, and keeps its traceback."""
        try:
            return work()
        except Exception as error:
            try:
                on_error()
            except Exception as also:  # the error that stopped the work is the one to tell
                error.add_note(f"and the checkpoint could not be written: {type(also).__name__}: {also}")
            if self.rank.distributed and (lost := lost_a_rank(error)):  # not this rank's kernels
                raise DistributedError(f"{what}: {lost}; {self.record.last_checkpoint()}") from None
            if not self.config.kernels or (isinstance(error, TrainError) and not isinstance(error, KernelExit)):
                raise
            kernels, unverified = self.config.kernels, self.config.unverified_kernels
            chosen = [f"{slot}={name}" + " (unverified)" * (slot in unverified) for slot, name in kernels.items()]
            raise KernelFailure(
                f"{what} failed computing with kernel{'s' * (len(chosen) > 1)} {', '.join(chosen)}: "
                f"{type(error).__name__}: {' '.join(str(error).split())}; stopped ({self.record.last_checkpoint()})"
            ) from None


def train(
    run: Run,
    quiet: bool = False,
    pictures: bool = True,
    trainer_class: type[Trainer] = Trainer,
    on_start: Callable[[], None] = lambda: None,
    **options,
) -> Outcome:
    """One training process: join the process group, train, draw the pictures (rank 0), leave together, unlock.
    `on_start` runs once the trainer is built (a finished run refused); `options` go to `trainer_class` (`learn
    train`'s CourseTrainer)."""
    rank = run.rank
    try:
        rank.init(run.device)
        trainer = trainer_class(run, quiet=quiet, **options)
        on_start()
        outcome = trainer.run()
        if outcome.reason == "finished":
            if rank.is_main and pictures and outcome.pictures_problem is None:
                outcome = replace(outcome, pictures_problem=draw_pictures(run.task, run.layout))
            rank.barrier()  # a gloo rank that tore down its group while rank 0 still drew aborted the process
        return outcome
    except Exception as error:  # a collective outside a step or an evaluation (a barrier, the checksums)
        if rank.distributed and (lost := lost_a_rank(error)):
            raise lost from None
        raise
    finally:
        rank.shutdown()
        run.close()


def _check_optimiser_state(saved: dict[str, Any], optimizer: Optimizer) -> None:
    """The checkpoint's optimiser state against this run's parameters, so a mismatch is one line, not a failed step."""
    params = [param for group in optimizer.param_groups for param in group["params"]]
    for index, slots in saved["state"].items():
        if not 0 <= int(index) < len(params):
            raise RunDirError(
                f"checkpoint's optimiser state names parameter {index}; this run's model has {len(params)}"
            )
        shape = params[int(index)].shape
        for slot, value in slots.items():
            wanted = () if slot == "step" else tuple(shape)
            if value.numel() != math.prod(wanted) or (slot != "step" and value.shape != shape):
                raise RunDirError(
                    f"checkpoint's optimiser state {index}/{slot} has shape {tuple(value.shape)}, not {wanted}"
                )
