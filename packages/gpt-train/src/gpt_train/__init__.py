"""gpt_train: the gpt-train command line and the training loop behind it; the names below are imported on first use,
so that `gpt-train --help` does not import torch."""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "config": ("ConfigError", "RunConfig", "resolve_run_config"),
    "errors": ("TrainError",),
    "loading": ("LoadedRun", "load_run", "load_snapshots"),
    "runs": ("Run", "new_run", "resumed_run"),
    "trainer": ("Outcome", "Trainer", "train"),
}
_DEFINED_IN = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'gpt_train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpt_train.{_DEFINED_IN[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_DEFINED_IN)
