"""Run directories: where a run's files live, refusing to overwrite one by accident, and loading one back."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import torch

from gpt_core import GPT
from gpt_train.checkpoint import CHECKPOINT_NAME, load_checkpoint, load_weights
from gpt_train.config import CONFIG_NAME, RunConfig
from gpt_train.errors import UserError
from gpt_train.pictures import ATTENTION_NAME
from gpt_train.trainer import FINAL_NAME, METRICS_NAME

RUN_FILES = (
    CONFIG_NAME,
    METRICS_NAME,
    FINAL_NAME,
    CHECKPOINT_NAME,
    ATTENTION_NAME,
    "curves.png",
    "attention.png",
    "grokking.png",
)


def default_run_dir(task: str) -> Path:
    return Path("runs") / f"{task}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def prepare_run_dir(path: Path, force: bool) -> None:
    """Create `path` for a new run. A directory already holding a run is refused unless `force`,
    which removes that run's files (and nothing else)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} exists and is not a directory")
    existing = [name for name in RUN_FILES if (path / name).exists()]
    if existing and not force:
        raise UserError(
            f"{path} already holds a run ({existing[0]}); continue it with --resume {path} or replace it with --force"
        )
    try:
        for name in existing:
            (path / name).unlink()
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot use {path} as a run directory: {error.strerror or error}") from None


def load_run(run_dir: Path, device: torch.device) -> tuple[RunConfig, GPT]:
    """The configuration and trained model of a run directory, on `device`."""
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist")
    config = RunConfig.load(run_dir)
    state = load_checkpoint(run_dir / CHECKPOINT_NAME, config.task)
    model = GPT(config.model)
    load_weights(model, state.model)
    return config, model.to(device).eval()
