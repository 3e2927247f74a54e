"""Grokking: held-out accuracy jumping long after training accuracy saturates.

The two series are one task metric measured on each split, so their keys come from
:func:`gpt_viz.run_layout.metric_key` rather than being written out for one task.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpt_viz.canvas import legend_below, new_figure, use_log_scale
from gpt_viz.errors import VizError
from gpt_viz.run_data import PathLike, Record, load_metrics, metric_series, run_directory
from gpt_viz.run_layout import HELDOUT, TRAIN, metric_key, parse_metric_key

THRESHOLD = 0.99
METRIC = "accuracy"
# Each split's legend prefix and colour.
_SPLIT_STYLE = ((TRAIN, "train", "tab:blue"), (HELDOUT, "held-out", "tab:red"))


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float = THRESHOLD) -> int | None:
    """The first step whose value reaches ``threshold``, or None if none does."""
    reached = np.flatnonzero(values >= threshold)
    return int(steps[reached[0]]) if reached.size else None


def grokking(run: PathLike | Sequence[Record], threshold: float = THRESHOLD, *, metric: str = METRIC) -> Figure:
    """Train and held-out ``metric`` (a fraction that grows, by default accuracy) against step on a log x axis.

    The first step at which each reaches ``threshold`` gets a dashed vertical
    line and a label, so the delay between memorising and generalising can be
    read off; a series that never reaches it says so in the legend.  ``run``
    is a run directory or records already loaded with ``load_metrics``.
    ``metric`` is the task's name for it (``exact_match``), without a split:
    the keys ``train_<metric>`` and ``heldout_<metric>`` are read.
    Step 0 is left out because a log axis cannot show it.
    """
    keys = _split_keys(metric)
    if isinstance(run, (str, os.PathLike)):
        source = str(run_directory(run))
        records = load_metrics(run)
    else:
        source, records = "the records", list(run)

    figure = new_figure(8.0, 5.0)
    ax = figure.add_subplot()
    label = metric.replace("_", " ")
    for key, (_, prefix, colour) in zip(keys, _SPLIT_STYLE, strict=True):
        steps, values = metric_series(records, key, source=source)
        positive = steps > 0
        _draw_accuracy(ax, steps[positive], values[positive], f"{prefix} {label}", colour, threshold)
    ax.axhline(threshold, color="0.5", linestyle=":", linewidth=0.8)
    use_log_scale(ax, "x")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("step (log scale)")
    ax.set_ylabel(label)
    ax.set_title(f"grokking: first step at {label} ≥ {threshold:g}")
    ax.grid(alpha=0.3, which="both")
    legend_below(ax)
    return figure


def _split_keys(metric: str) -> list[str]:
    """The train and held-out keys of ``metric``; a key given in its place would be looked up as ``train_train_…``."""
    parsed = parse_metric_key(metric)
    if parsed is not None:
        raise VizError(f"grokking needs a metric name without its split: {parsed.name!r}, not {metric!r}")
    if not metric:
        raise VizError(f"grokking needs a metric name without its split, such as {METRIC!r}")
    return [metric_key(split, metric) for split, _, _ in _SPLIT_STYLE]


def _draw_accuracy(ax: Axes, steps: np.ndarray, values: np.ndarray, name: str, colour: str, threshold: float) -> None:
    crossing = first_crossing(steps, values, threshold)
    if crossing is None:
        label = f"{name} (never reaches {threshold:g})"
    else:
        label = f"{name} (≥ {threshold:g} at step {crossing})"
    ax.plot(steps, values, color=colour, linewidth=1.4, label=label)
    if crossing is not None:
        ax.axvline(crossing, color=colour, linestyle="--", linewidth=1.0)
        ax.annotate(
            f"step {crossing}",
            xy=(crossing, 0.5),
            xytext=(4, 0),
            textcoords="offset points",
            rotation=90,
            va="center",
            color=colour,
            fontsize=9,
        )
