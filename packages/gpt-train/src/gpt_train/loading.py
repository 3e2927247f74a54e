"""`gpt_train.load_run`: a trained run in Python, in one call.

What the commands do after reading a run (build its task, put its model on a device, in eval mode),
for a notebook or a script: `load_run("sort").model.run_with_cache(...)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from gpt_core import GPT
from gpt_tasks import Task
from gpt_train.checkpoint import CheckpointError, load_checkpoint, load_weights
from gpt_train.config import RunConfig
from gpt_train.run_names import resolve_run_dir
from gpt_train.runs import open_run
from gpt_viz import RunLayout


@dataclass(frozen=True)
class LoadedRun:
    """A run's trained model (eval mode), the task it was trained on, its configuration, the step of its
    checkpoint and the directory it was read from."""

    model: GPT
    task: Task
    config: RunConfig
    step: int
    run_dir: Path


def load_run(run: str | Path, device: torch.device | str = "cpu", trust_kernels: bool = False) -> LoadedRun:
    """The run in directory `run`, or, given a task name, that task's newest run under ./runs; its model on
    `device`, computing with the kernels it was trained with. A run trained with module-path kernels
    (module:function) needs `trust_kernels`: importing them runs their code (`gpt_train.runs.saved_kernels`)."""
    run_dir, _ = resolve_run_dir(run)
    saved = open_run(run_dir, device, trust_kernels=trust_kernels)
    return LoadedRun(saved.model, saved.config.build_task(), saved.config, saved.step, run_dir)


def load_snapshots(
    run: str | Path, device: torch.device | str = "cpu", trust_kernels: bool = False
) -> Iterator[tuple[int, GPT]]:
    """(step, model) for each snapshot the run kept (`--set snapshot_every=N`), in step order: one model in eval
    mode whose weights are replaced at each step, so a long run's snapshots are read one at a time."""
    loaded = load_run(run, device, trust_kernels)
    for step, path in RunLayout(loaded.run_dir).snapshots().items():
        state = load_checkpoint(path, loaded.config.task)
        if state.step != step:  # a file renamed or copied in: its name is not its step
            raise CheckpointError(f"snapshot {path} holds the weights of step {state.step:,}, not of step {step:,}")
        load_weights(loaded.model, state.model)
        yield step, loaded.model
