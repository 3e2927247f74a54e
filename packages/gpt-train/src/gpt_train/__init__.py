"""gpt_train: the gpt-train command line and the training loop behind it."""

from gpt_train.config import ConfigError, RunConfig, resolve_run_config
from gpt_train.errors import TrainError
from gpt_train.loading import LoadedRun, load_run, load_snapshots
from gpt_train.runs import Run, new_run, resumed_run
from gpt_train.trainer import Outcome, Trainer, train

__all__ = [
    "ConfigError",
    "LoadedRun",
    "Outcome",
    "Run",
    "RunConfig",
    "TrainError",
    "Trainer",
    "load_run",
    "load_snapshots",
    "new_run",
    "resolve_run_config",
    "resumed_run",
    "train",
]
