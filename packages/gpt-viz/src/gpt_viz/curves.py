"""Training curves of one run and overlays of several runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gpt_viz.attention import caption_axes, draw_attention
from gpt_viz.canvas import counted, legend_below, lone_marker, new_figure, plain, step_axis, use_log_scale
from gpt_viz.errors import VizError
from gpt_viz.run_data import (
    PathLike,
    Record,
    is_run_file,
    load_attention,
    load_config,
    load_metrics,
    metric_series,
    run_directory,
)
from gpt_viz.run_layout import RunLayout, parse_metric_key

LOSS_COLOUR = "tab:blue"
METRIC_COLOUR = "tab:orange"
MAX_MARKED_POINTS = 60


def is_loss(metric: str) -> bool:
    """Losses span orders of magnitude, so they read best on a log axis."""
    return metric == "loss" or metric.endswith("_loss")


def point_marker(metric: str, steps: np.ndarray) -> str | None:
    """Dots on a sparse evaluation series (a key naming a split) show where the data is; per-step logs would smudge.
    A lone point is dotted whatever it is."""
    sparse = parse_metric_key(metric) is not None and len(steps) <= MAX_MARKED_POINTS
    return "o" if sparse else lone_marker(steps)


def training_curves(run_dir: PathLike, metric: str | None = None) -> Figure:
    """A run's headline figure: training loss with ``metric`` (default: the config's primary_metric) on a twin axis,
    the task probes under it, and beside them, given attention.npz, the last layer's attention averaged over heads."""
    run = run_directory(run_dir)
    records = load_metrics(run)
    config = load_config(run)
    alone = "training loss (config names no primary_metric)"
    if metric is None and (metric := config.get("primary_metric")) and all(metric not in r for r in records):
        alone, metric = f"training loss ({metric} is not logged yet)", None  # a run before its first evaluation
    has_attention = is_run_file(RunLayout(run).attention)
    probes = probe_keys(records)

    figure = new_figure(12.5 if has_attention else 7.0, 7.5 if probes else 5.0)
    grid = figure.add_gridspec(
        2 if probes else 1, 2 if has_attention else 1, width_ratios=[1.15, 1.0] if has_attention else None,
        height_ratios=[2.0, 1.0] if probes else None,
    )  # fmt: skip
    curves_ax = figure.add_subplot(grid[0, 0])
    _draw_loss_and_metric(curves_ax, records, metric, source=str(run), alone=alone)
    if probes:
        _draw_probes(figure.add_subplot(grid[1, 0], sharex=curves_ax), records, probes, source=str(run))
        curves_ax.set_xlabel("")
    if has_attention:
        _draw_last_layer_attention(figure, figure.add_subplot(grid[:, 1]), run)
    task = config.get("task")
    name = RunLayout(run).name
    figure.suptitle(plain(f"{task} — {name}" if task else name))
    return figure


def _draw_loss_and_metric(ax: Axes, records: Sequence[Record], metric: str | None, source: str, alone: str) -> None:
    steps, losses = metric_series(records, "loss", source=source)
    handles = ax.plot(
        steps, losses, color=LOSS_COLOUR, marker=lone_marker(steps), markersize=3, linewidth=1.2, label="training loss"
    )
    use_log_scale(ax, "y")
    step_axis(ax)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss", color=LOSS_COLOUR)
    ax.tick_params(axis="y", labelcolor=LOSS_COLOUR)
    ax.grid(alpha=0.3)
    if metric is None:
        ax.set_title(alone)
    else:  # a loss on the same axis, so that the two compare; another metric on a twin axis
        steps, values = metric_series(records, metric, source=source)
        twin = ax if is_loss(metric) else ax.twinx()
        marker = point_marker(metric, steps)
        handles += twin.plot(
            steps, values, color=METRIC_COLOUR, marker=marker, markersize=3, linewidth=1.2, label=metric
        )
        if twin is ax:
            ax.set_ylabel("loss", color="black")
            ax.tick_params(axis="y", labelcolor="black")
        else:
            twin.set_ylabel(metric, color=METRIC_COLOUR)
            twin.tick_params(axis="y", labelcolor=METRIC_COLOUR)
            if metric != "lr" and _all_fractions(values):  # lr is no fraction of anything
                twin.set_ylim(-0.02, 1.02)
        ax.set_title(f"training loss and {metric}")
    legend_below(ax, handles)


PER_HEAD_PROBE = re.compile(r"_l\d+h\d+$")  # heldout_probe_induction_l1h0: the induction picture's, not this panel's


def probe_keys(records: Sequence[Record]) -> list[str]:
    """The task probes a run logged (``heldout_probe_source_attention``), in name order, per-head ones left out."""
    keys = {key for record in records for key in record}
    probes = (key for key in keys if (parsed := parse_metric_key(key)) is not None and parsed.is_probe)
    return sorted(key for key in probes if not PER_HEAD_PROBE.search(key))


def _draw_probes(ax: Axes, records: Sequence[Record], keys: Sequence[str], source: str) -> None:
    values = []
    for key in keys:
        steps, series = metric_series(records, key, source=source)
        ax.plot(steps, series, marker=point_marker(key, steps), markersize=3, linewidth=1.2, label=key)
        values.append(series)
    if _all_fractions(np.concatenate(values)):
        ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("step")
    ax.set_ylabel("task probes")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)  # probes mostly rise: the lower right is where they are not


def _all_fractions(values: np.ndarray) -> bool:
    """Accuracies get a fixed 0–1 axis so that 0.5 looks like 0.5 in every run."""
    finite = values[np.isfinite(values)]
    return bool(finite.size) and bool(np.all((finite >= 0) & (finite <= 1)))


def _draw_last_layer_attention(figure: Figure, ax: Axes, run: Path) -> None:
    snapshot = load_attention(run)
    n_layer, n_head = snapshot.weights.shape[:2]
    prompt = snapshot.prompt_length
    image = draw_attention(ax, snapshot.weights[-1].mean(axis=0), snapshot.tokens, prompt_length=prompt)
    heads = f", mean of {counted(n_head, 'head')}" if n_head > 1 else ""  # one head is drawn as it is
    ax.set_title(f"layer {n_layer - 1} attention{heads} (held-out example)")
    figure.colorbar(image, ax=ax, label="attention weight", shrink=0.85)
    caption_axes(ax, prompt, len(snapshot.tokens))


def compare_runs(
    run_dirs: Sequence[PathLike], metric: str, labels: Sequence[str] | None = None, log_y: bool | None = None
) -> Figure:
    """Several runs' ``metric`` against step on one axis, as for an ablation; ``labels`` default to the directory
    names, ``log_y`` to a log axis for losses only."""
    runs = [run_directory(run_dir) for run_dir in run_dirs]
    if not runs:
        raise VizError("compare needs at least one run directory")
    labels = [plain(RunLayout(run).name) for run in runs] if labels is None else [plain(label) for label in labels]
    if len(labels) != len(runs):
        raise VizError(f"got {counted(len(labels), 'label')} for {counted(len(runs), 'run')}; give one label per run")

    series = [metric_series(load_metrics(run), metric, source=str(run)) for run in runs]
    logarithmic = is_loss(metric) if log_y is None else log_y
    if logarithmic and any(value <= 0 for _, values in series for value in values):
        raise VizError(f"{metric} has values at or below 0, which a log axis cannot show; use --linear-y")
    figure = new_figure(8.0, 5.0)
    ax = figure.add_subplot()
    lines = []
    for (steps, values), label in zip(series, labels, strict=True):
        lines += ax.plot(steps, values, linewidth=1.3, marker=point_marker(metric, steps), markersize=3, label=label)
    if logarithmic:
        use_log_scale(ax, "y")
    label = "training loss" if metric == "loss" else metric
    step_axis(ax)
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.set_title(f"{label} by run")
    ax.grid(alpha=0.3)
    ax.legend(handles=lines)  # handed over: matplotlib leaves out of its own pick a label starting with "_"
    return figure
