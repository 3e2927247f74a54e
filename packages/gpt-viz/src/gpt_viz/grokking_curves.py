"""Grokking: held-out accuracy jumping long after training accuracy saturates, drawn as the papers draw it, with
the two losses and a progress measure (a quantity of the weights that moves first) on one log step axis."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpt_viz.canvas import caption_below, legend_below, lone_marker, new_figure, use_log_scale
from gpt_viz.errors import VizError
from gpt_viz.run_data import (
    THRESHOLD,
    PathLike,
    Record,
    collapses,
    first_crossing,
    load_metrics,
    metric_series,
    run_directory,
)
from gpt_viz.run_layout import HELDOUT, PROBE_PREFIX, TRAIN, metric_key, parse_metric_key

METRIC = "accuracy"
SPIKE = 2.0  # how many times its value before a collapse the training loss must reach in it to be called a spike
Span = tuple[int, int | None]  # a collapse: its first step below the threshold, its first back at it or None
_SPLIT_STYLE = ((TRAIN, "train", "tab:blue"), (HELDOUT, "held-out", "tab:red"))


def grokking(
    run: PathLike | Sequence[Record],
    threshold: float = THRESHOLD,
    *,
    metric: str = METRIC,
    loss: str | None = None,
    progress: str | None = None,
) -> Figure:
    """Train and held-out ``metric`` (a name without its split) on a log step axis, each first step at ``threshold``
    dashed (the delay between memorising and generalising) and each later span back below it shaded (the slingshot);
    ``progress`` (a metric key) adds a panel under it, ``loss`` (a name) the two losses at the bottom."""
    keys = _split_keys(metric)
    loss_keys = _split_keys(loss) if loss is not None else None
    if isinstance(run, (str, os.PathLike)):
        source, records = str(run_directory(run)), load_metrics(run)
    else:
        source, records = "the records", list(run)

    heights = [3.0] + [1.4] * (progress is not None) + [2.0] * (loss is not None)
    figure = new_figure(8.0, 2.0 + sum(heights))
    axes = list(figure.subplots(len(heights), 1, sharex=True, height_ratios=heights, squeeze=False)[:, 0])
    ax = axes[0]
    label = metric.replace("_", " ")
    crossings, collapsed = [], []
    for key, (_, prefix, colour) in zip(keys, _SPLIT_STYLE, strict=True):
        steps, values = _positive_steps(records, key, source)
        finite = values[np.isfinite(values)]
        if finite.size and not np.all((finite >= 0) & (finite <= 1)):
            raise VizError(
                f"grokking draws a fraction such as accuracy against {threshold:g}; {key} runs from "
                f"{finite.min():g} to {finite.max():g} (a loss goes in its own panel: --loss {metric})"
            )
        crossing, spans = _draw_split(ax, steps, values, prefix, label, colour, threshold)
        crossings.append((crossing, colour))
        collapsed.append(spans)
    ax.axhline(threshold, color="0.5", linestyle=":", linewidth=0.8)
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel(label)
    ax.set_title(f"grokking: first step at {label} ≥ {threshold:g}")
    if progress is not None:
        _draw_progress(axes[1], records, progress, source)
    if loss_keys is not None:
        _draw_losses(axes[-1], records, loss_keys, source)
    legend_below(ax)
    for panel in axes[1:]:
        panel.legend(loc="best", frameon=False)  # under the accuracy panel's legend, inside its own axes
        for crossing, colour in crossings:
            if crossing is not None:
                panel.axvline(crossing, color=colour, linestyle="--", linewidth=1.0)
    for panel in axes:
        panel.grid(alpha=0.3, which="both")
    use_log_scale(axes[-1], "x")
    axes[-1].set_xlabel("step (log scale)")
    rise = _loss_rise(records, loss_keys[0], collapsed[0], source) if loss_keys is not None else None
    caption_below(figure, *_what_to_look_at(label, threshold, [c for c, _ in crossings], collapsed[0], rise))
    return figure


def _what_to_look_at(
    label: str, threshold: float, crossings: list[int | None], train_collapses: list[Span], loss_rise: float | None
) -> list[str]:
    lines = []
    fitted, generalised = crossings
    if fitted is not None and generalised is not None and generalised > fitted:
        lines.append(
            f"Look at the gap between the dashed lines: train {label} reaches {threshold:g} at step {fitted}, "
            f"held-out only at step {generalised} ({generalised / fitted:.2g}x later)."
        )
    if train_collapses:
        recovers = "recovers" if train_collapses[-1][1] is not None else f"is below {threshold:g} at the last step"
        spike = f", the training loss rising up to {loss_rise:.2g}x (bottom)" if loss_rise is not None else ""
        lines.append(
            f"Shaded: after the fit, train {label} dips and {recovers}{spike}: the slingshot (Thilak et al. 2022)."
        )
    return lines


def _loss_rise(records: Sequence[Record], key: str, spans: list[Span], source: str) -> float | None:
    """How many times its value at the step before a collapse the training loss reaches within it, the largest over
    the collapses; None unless that is at least SPIKE: a spike the loss panel shows."""
    steps, values = _positive_steps(records, key, source)
    finite = np.isfinite(values)
    rises = []
    for start, end in spans:
        before = values[finite & (steps < start)]
        within = values[finite & (steps >= start) & (steps < (np.inf if end is None else end))]
        if before.size and within.size and before[-1] > 0:
            rises.append(float(within.max() / before[-1]))
    return max(rises) if rises and max(rises) >= SPIKE else None


def _positive_steps(records: Sequence[Record], key: str, source: str) -> tuple[np.ndarray, np.ndarray]:
    steps, values = metric_series(records, key, source=source)
    positive = steps > 0
    return steps[positive], values[positive]


def _draw_progress(ax: Axes, records: Sequence[Record], key: str, source: str) -> None:
    steps, values = _positive_steps(records, key, source)
    parsed = parse_metric_key(key)
    name = key if parsed is None else parsed.name.removeprefix(PROBE_PREFIX) if parsed.is_probe else parsed.name
    label = f"progress measure: {name.replace('_', ' ')}"
    ax.plot(steps, values, color="tab:green", marker=lone_marker(steps), linewidth=1.4, label=label)
    ax.set_ylabel(name.replace("_", " "))
    if values.size and np.all((values >= 0) & (values <= 1)):
        ax.set_ylim(-0.02, 1.05)


def _draw_losses(ax: Axes, records: Sequence[Record], keys: list[str], source: str) -> None:
    for key, (_, prefix, colour) in zip(keys, _SPLIT_STYLE, strict=True):
        steps, values = _positive_steps(records, key, source)
        label = f"{prefix} {parse_metric_key(key).name}"
        ax.plot(steps, values, color=colour, marker=lone_marker(steps), linewidth=1.4, label=label)
    use_log_scale(ax, "y")
    ax.set_ylabel(f"{parse_metric_key(keys[0]).name} (log scale)")


def _split_keys(metric: str) -> list[str]:
    parsed = parse_metric_key(metric)
    if parsed is not None:
        raise VizError(f"grokking needs a metric name without its split: {parsed.name!r}, not {metric!r}")
    if not metric:
        raise VizError(f"grokking needs a metric name without its split, such as {METRIC!r}")
    return [metric_key(split, metric) for split, _, _ in _SPLIT_STYLE]


def _draw_split(
    ax: Axes, steps: np.ndarray, values: np.ndarray, prefix: str, label: str, colour: str, threshold: float
) -> tuple[int | None, list[Span]]:
    """One split's curve, crossing and collapses; returns the crossing (or None) and the collapses."""
    crossing = first_crossing(steps, values, threshold)
    reached = f"never reaches {threshold:g}" if crossing is None else f"≥ {threshold:g} at step {crossing}"
    ax.plot(
        steps, values, color=colour, marker=lone_marker(steps), linewidth=1.4, label=f"{prefix} {label} ({reached})"
    )
    if crossing is not None:
        ax.axvline(crossing, color=colour, linestyle="--", linewidth=1.0)
        text = {"xytext": (4, 0), "textcoords": "offset points", "rotation": 90, "va": "center", "fontsize": 9}
        ax.annotate(f"step {crossing}", xy=(crossing, 0.5), color=colour, **text)
    spans = collapses(steps, values, threshold)
    times = "once" if len(spans) == 1 else f"{len(spans)} times"
    shaded = f"{prefix} below {threshold:g} again, {times}" + (" (the slingshot)" if prefix == "train" else "")
    for i, (start, end) in enumerate(spans):
        ax.axvspan(
            start, float(steps[-1]) if end is None else end, color=colour, alpha=0.12, label=None if i else shaded
        )
    return crossing, spans
