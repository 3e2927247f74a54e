"""`gpt_train.load_run`: a trained run in one call, for every command that reads one and for a notebook."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from gpt_core import DEFAULT_KERNELS, GPT
from gpt_tasks import Task
from gpt_train.checkpoint import CheckpointError, check_fits_checkpoint, load_checkpoint, load_weights
from gpt_train.config import RunConfig
from gpt_train.run_names import resolve_run_dir
from gpt_train.runs import RunDirError, saved_kernels
from gpt_viz import RunLayout


@dataclass
class LoadedRun:
    """A run's trained model (eval mode), configuration, checkpoint step and directory; `task` is built when asked."""

    model: GPT
    config: RunConfig
    step: int
    run_dir: Path

    @cached_property
    def task(self) -> Task:
        return self.config.build_task()


def load_run(
    run: str | Path, device: torch.device | str = "cpu", trust_kernels: bool = False, with_kernels: bool = True
) -> LoadedRun:
    """The run in directory `run` (or a task's newest under ./runs), its model on `device` with the kernels it was
    trained with (module-path ones need `trust_kernels`), or gpt-core's own without `with_kernels`."""
    run_dir, _ = resolve_run_dir(run)
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} is not a directory")
    config = RunConfig.load(run_dir)
    checkpoint = RunLayout(run_dir).checkpoint
    check_fits_checkpoint(config.model, checkpoint)  # before a kernel is imported or a model built
    kernels = saved_kernels(config, run_dir, trust_kernels, device=device) if with_kernels else DEFAULT_KERNELS
    state = load_checkpoint(checkpoint, config.task)
    model = GPT(config.model, kernels)
    load_weights(model, state.model)
    return LoadedRun(model.to(device).eval(), config, state.step, run_dir)


def load_snapshots(
    run: str | Path, device: torch.device | str = "cpu", trust_kernels: bool = False
) -> Iterator[tuple[int, GPT]]:
    """(step, model) for each snapshot the run kept, in step order: one model whose weights each step replaces."""
    loaded = load_run(run, device, trust_kernels)
    for step, path in RunLayout(loaded.run_dir).snapshots().items():
        state = load_checkpoint(path, loaded.config.task)
        if state.step != step:  # a file renamed or copied in: its name is not its step
            raise CheckpointError(f"snapshot {path} holds the weights of step {state.step:,}, not of step {step:,}")
        load_weights(loaded.model, state.model)
        yield step, loaded.model
