"""gpt_train: the gpt-train command line and the training loop behind it."""

from gpt_train.config import RunConfig, TrainSettings, resolve_run_config
from gpt_train.errors import UserError
from gpt_train.trainer import Trainer

__all__ = ["RunConfig", "TrainSettings", "Trainer", "UserError", "resolve_run_config"]
