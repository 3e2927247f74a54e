"""Headless pictures of GPT training runs.

Every function returns a :class:`matplotlib.figure.Figure` drawn on an Agg
canvas; pyplot is never imported, so the package works on machines without a
display and leaves no global figure state behind.  Save with
:func:`save_figure`.

The picture functions are imported on first use (`__getattr__`), so that reading
a run's layout or metrics, which every command does, does not import matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpt_viz.errors import VizError
from gpt_viz.run_data import (
    ATTENTION_BUDGET,
    THRESHOLD,
    AttentionSnapshot,
    attention_lengths_within_budget,
    available_metrics,
    collapses,
    first_crossing,
    load_attention,
    load_attention_examples,
    load_config,
    load_metrics,
    metric_series,
    save_attention_examples,
)
from gpt_viz.run_layout import (
    AXIS_KEYS,
    EXAMPLES,
    HELDOUT,
    SPLITS,
    TRAIN,
    MetricKey,
    RunLayout,
    metric_key,
    parse_metric_key,
    probe_key,
)

_DRAWN_BY = {
    "attention_grid": "attention",
    "attention_map": "attention",
    "SAVE_DPI": "canvas",
    "save_figure": "canvas",
    "compare_runs": "curves",
    "training_curves": "curves",
    "fourier_spectra": "fourier",
    "length_generalisation": "generalisation",
    "grokking": "grokking_curves",
    "induction_formation": "induction",
    "phase_change": "induction",
    "grokking_phases": "phases",
    "progress_measures": "phases",
}
"""Each name that needs matplotlib, and the module of gpt_viz that defines it: never a module of the same name,
which importing would put in the function's place."""


def __getattr__(name: str) -> Any:
    """A picture function, from its module, imported now (and matplotlib with it)."""
    if name not in _DRAWN_BY:
        raise AttributeError(f"module 'gpt_viz' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gpt_viz.{_DRAWN_BY[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AXIS_KEYS",
    "EXAMPLES",
    "HELDOUT",
    "SPLITS",
    "TRAIN",
    "MetricKey",
    "RunLayout",
    "metric_key",
    "parse_metric_key",
    "probe_key",
    "SAVE_DPI",
    "ATTENTION_BUDGET",
    "THRESHOLD",
    "AttentionSnapshot",
    "attention_lengths_within_budget",
    "VizError",
    "attention_grid",
    "attention_map",
    "available_metrics",
    "collapses",
    "compare_runs",
    "first_crossing",
    "fourier_spectra",
    "grokking",
    "grokking_phases",
    "induction_formation",
    "length_generalisation",
    "load_attention",
    "load_attention_examples",
    "load_config",
    "load_metrics",
    "metric_series",
    "phase_change",
    "progress_measures",
    "save_attention_examples",
    "save_figure",
    "training_curves",
]
