"""Headless pictures of GPT training runs.

Every function returns a :class:`matplotlib.figure.Figure` drawn on an Agg
canvas; pyplot is never imported, so the package works on machines without a
display and leaves no global figure state behind.  Save with
:func:`save_figure`.
"""

from gpt_viz.attention import attention_grid, attention_map
from gpt_viz.canvas import SAVE_DPI, save_figure
from gpt_viz.curves import compare_runs, training_curves
from gpt_viz.errors import VizError
from gpt_viz.fourier import fourier_spectra
from gpt_viz.generalisation import length_generalisation
from gpt_viz.grokking import first_crossing, grokking
from gpt_viz.induction import induction_formation as induction_formation
from gpt_viz.induction import phase_change as phase_change
from gpt_viz.run_data import (
    ATTENTION_BUDGET,
    AttentionSnapshot,
    attention_lengths_within_budget,
    available_metrics,
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
    "AttentionSnapshot",
    "attention_lengths_within_budget",
    "VizError",
    "attention_grid",
    "attention_map",
    "available_metrics",
    "compare_runs",
    "first_crossing",
    "fourier_spectra",
    "grokking",
    "length_generalisation",
    "load_attention",
    "load_attention_examples",
    "load_config",
    "load_metrics",
    "metric_series",
    "save_attention_examples",
    "save_figure",
    "training_curves",
]
