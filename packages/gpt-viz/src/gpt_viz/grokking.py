"""Grokking: held-out accuracy jumping long after training accuracy saturates."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpt_viz.canvas import legend_below, new_figure, use_log_scale
from gpt_viz.run_data import PathLike, Record, load_metrics, metric_series, run_directory

THRESHOLD = 0.99
_SERIES = (
    ("train_accuracy", "train accuracy", "tab:blue"),
    ("heldout_accuracy", "held-out accuracy", "tab:red"),
)


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float = THRESHOLD) -> int | None:
    """The first step whose value reaches ``threshold``, or None if none does."""
    reached = np.flatnonzero(values >= threshold)
    return int(steps[reached[0]]) if reached.size else None


def grokking(run: PathLike | Sequence[Record], threshold: float = THRESHOLD) -> Figure:
    """Train and held-out accuracy against step on a log x axis.

    The first step at which each reaches ``threshold`` gets a dashed vertical
    line and a label, so the delay between memorising and generalising can be
    read off; a series that never reaches it says so in the legend.  ``run``
    is a run directory or records already loaded with ``load_metrics``.
    Step 0 is left out because a log axis cannot show it.
    """
    if isinstance(run, (str, os.PathLike)):
        source = str(run_directory(run))
        records = load_metrics(run)
    else:
        source, records = "the records", list(run)

    figure = new_figure(8.0, 5.0)
    ax = figure.add_subplot()
    for key, name, colour in _SERIES:
        steps, values = metric_series(records, key, source=source)
        positive = steps > 0
        _draw_accuracy(ax, steps[positive], values[positive], name, colour, threshold)
    ax.axhline(threshold, color="0.5", linestyle=":", linewidth=0.8)
    use_log_scale(ax, "x")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("step (log scale)")
    ax.set_ylabel("accuracy")
    ax.set_title(f"grokking: first step at accuracy ≥ {threshold:g}")
    ax.grid(alpha=0.3, which="both")
    legend_below(ax)
    return figure


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
