"""Headless pictures of GPT training runs: each a matplotlib Figure on an Agg canvas, saved with save_figure. The
picture functions are imported when first named, so reading a run's layout or metrics does not import matplotlib."""

import importlib

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

# The modules that need matplotlib and the names each defines; no name is also a module's, which importing would put
# in the name's place.
_PICTURES = {
    "attention": ("attention_grid", "attention_map"),
    "canvas": ("SAVE_DPI", "save_figure"),
    "curves": ("compare_runs", "training_curves"),
    "fourier": ("fourier_spectra",),
    "generalisation": ("length_generalisation",),
    "grokking_curves": ("grokking",),
    "induction": ("induction_formation", "phase_change"),
    "phases": ("grokking_phases", "progress_measures"),
}
_MODULE_OF = {name: module for module, names in _PICTURES.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'gpt_viz' has no attribute {name!r}")
    globals()[name] = value = getattr(importlib.import_module(f"gpt_viz.{_MODULE_OF[name]}"), name)
    return value


__all__ = [
    "VizError", "ATTENTION_BUDGET", "THRESHOLD", "AttentionSnapshot", "attention_lengths_within_budget",
    "available_metrics", "collapses", "first_crossing", "load_attention", "load_attention_examples", "load_config",
    "load_metrics", "metric_series", "save_attention_examples", "AXIS_KEYS", "EXAMPLES", "HELDOUT", "SPLITS",
    "TRAIN", "MetricKey", "RunLayout", "metric_key", "parse_metric_key", "probe_key"
] + sorted(_MODULE_OF)  # fmt: skip
