"""gpt_train: the gpt-train command line and the training loop behind it.

The names below are imported on first use (`__getattr__`), so that `gpt-train --help`, which imports this
package, does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_DEFINED_IN = {
    "ConfigError": "config",
    "RunConfig": "config",
    "resolve_run_config": "config",
    "TrainError": "errors",
    "LoadedRun": "loading",
    "load_run": "loading",
    "load_snapshots": "loading",
    "Run": "runs",
    "new_run": "runs",
    "resumed_run": "runs",
    "Outcome": "trainer",
    "Trainer": "trainer",
    "train": "trainer",
}
"""Each public name, and the module of gpt_train that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'gpt_train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpt_train.{_DEFINED_IN[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_DEFINED_IN)
