"""What a run leaves in its directory as it trains: metrics.jsonl, checkpoints and final.json."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from gpt_train.checkpoint import TrainingState, load_checkpoint, save_checkpoint, save_snapshot
from gpt_train.files import WriteError, write_json_atomically
from gpt_train.runs import MetricsLog, Run, RunWarning


class Record:
    """What a run leaves in its directory as it goes; a no-op on every rank but 0, which alone writes."""

    def __init__(self, run: Run):
        self.layout = run.layout
        self.task_name = run.config.task
        self.active = run.rank.is_main
        self.metrics = MetricsLog(run.layout.metrics)
        self.snapshots_kept = True  # until one cannot be written

    def restore(self) -> TrainingState:
        return load_checkpoint(self.layout.checkpoint, self.task_name)

    def start_at(self, step: int) -> None:
        """Forget what was written past `step`, where a resumed run continues."""
        if self.active:
            self.metrics.keep_through(step)
            for later in [path for at, path in self.layout.snapshots().items() if at > step]:
                later.unlink()

    def log(self, record: dict[str, Any]) -> None:
        if self.active:
            self.metrics.write(record)

    def checkpoint(self, state: Callable[[], TrainingState]) -> None:
        if self.active:
            save_checkpoint(self.layout.checkpoint, state())

    def snapshot(self, step: int, weights: dict[str, torch.Tensor]) -> None:
        """The weights at `step`; one that cannot be written is a warning, and the run goes on without more."""
        if not (self.active and self.snapshots_kept):
            return
        path = self.layout.snapshot(step)
        try:
            save_snapshot(path, self.task_name, step, weights)
        except WriteError as error:
            self.snapshots_kept = False
            warnings.warn(
                f"cannot write snapshot {path} ({error.reason or error}); the run goes on without snapshots, keeping "
                "those written",
                RunWarning,
                stacklevel=2,
            )

    def finish(self, final: dict[str, Any]) -> None:
        if self.active:
            write_json_atomically(self.layout.final, final)

    def last_checkpoint(self) -> str:
        checkpoint = self.layout.checkpoint
        return f"the last good checkpoint is {checkpoint}" if checkpoint.exists() else "no checkpoint was written yet"
