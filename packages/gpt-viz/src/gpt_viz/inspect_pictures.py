"""Pictures of the records `gpt-train inspect` writes into a run, so each can be redrawn from its file alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpt_viz.canvas import counted, new_figure, use_log_scale
from gpt_viz.errors import VizError
from gpt_viz.run_data import PathLike, read_json_object

CMAP = "viridis"
MAX_ANNOTATED_CELLS = 160  # above it, values are left to the colour bar: numbers would overlap


def load_inspection(path: PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise VizError(f"{path} does not exist; `gpt-train inspect` writes it")
    return read_json_object(path)


def _grid(record: Mapping[str, Any], key: str) -> np.ndarray:
    try:
        grid = np.array(_field(record, key), dtype=float)
    except (TypeError, ValueError):
        raise VizError(f"{key!r} must be rows of numbers of equal length") from None
    if grid.ndim != 2 or grid.size == 0 or not np.all(np.isfinite(grid)):
        raise VizError(f"{key!r} must be a non-empty grid of finite numbers, got shape {grid.shape}")
    return grid


def _field(record: Mapping[str, Any], key: str) -> Any:
    if key not in record:
        raise VizError(f"the record has no {key!r}")
    return record[key]


def _heatmap(
    ax: Axes, grid: np.ndarray, vmin: float, vmax: float, rows: Sequence[str], columns: Sequence[str], fmt: str
):
    image = ax.imshow(grid, cmap=CMAP, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xticks(range(len(columns)), columns, rotation=90 if max(map(len, columns)) > 3 else 0)
    if grid.size <= MAX_ANNOTATED_CELLS:
        middle = (vmin + vmax) / 2
        for (row, column), value in np.ndenumerate(grid):
            colour = "black" if value > middle else "white"
            ax.text(column, row, _cell_text(value, fmt), ha="center", va="center", fontsize=8, color=colour)
    return image


def _at_step(record: Mapping[str, Any]) -> str:
    step = record.get("step")
    return f", checkpoint of step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""


def _cell_text(value: float, fmt: str) -> str:
    """Never "-0.00"."""
    text = format(value, fmt)
    return text.lstrip("-") if float(text) == 0 else text


def head_ablation_heatmap(record: Mapping[str, Any]) -> Figure:
    """Layer x head: the metric with that head zero- and mean-ablated, on one colour scale."""
    zero, mean = _grid(record, "zero"), _grid(record, "mean")
    if zero.shape != mean.shape:
        raise VizError(f"'zero' is {zero.shape} layers x heads but 'mean' is {mean.shape}")
    metric, baseline = _field(record, "metric"), float(_field(record, "baseline"))
    low, high = min(zero.min(), mean.min(), baseline, 0.0), max(zero.max(), mean.max(), baseline)
    n_layer, n_head = zero.shape
    figure = new_figure(2.0 + 2.4 * max(n_head, 2), 1.6 + 0.6 * n_layer)
    axes = figure.subplots(1, 2, sharey=True)
    rows, columns = [f"layer {i}" for i in range(n_layer)], [str(h) for h in range(n_head)]
    for ax, grid, how in zip(axes, (zero, mean), ("zero", "mean"), strict=True):
        image = _heatmap(ax, grid, low, high, rows, columns, ".3f")
        ax.set_title(f"{how}-ablated")
        ax.set_xlabel("head")
    figure.colorbar(image, ax=axes, label=metric, shrink=0.9)
    examples = record.get("examples")
    known = isinstance(examples, int) and examples > 0
    scored = f" on {counted(examples, 'held-out example')}" if known else ""
    digits = max(4, len(str(examples))) if known else 4  # 2 wrong of 250,050 must not read as 1.0000
    title = f"{metric} with one head removed (baseline {baseline:.{digits}f}){scored}{_at_step(record)}"
    figure.suptitle(title, wrap=True)  # a model of one or two heads draws a figure narrower than the title
    return figure


def logit_lens_picture(record: Mapping[str, Any]) -> Figure:
    """Exact match and loss of the residual stream decoded at each depth, and accuracy by depth and position."""
    depths = list(_field(record, "depths"))
    positions = list(_field(record, "answer_positions"))
    accuracy = _grid(record, "accuracy")
    if accuracy.shape != (len(depths), len(positions)):
        raise VizError(f"'accuracy' is {accuracy.shape}, not depths x answer positions {len(depths), len(positions)}")
    exact, loss = np.array(_field(record, "exact_match"), float), np.array(_field(record, "loss"), float)
    figure = new_figure(12.0, 4.8)
    curves, grid_ax = figure.subplots(1, 2, width_ratios=[1.0, 1.1])
    steps = np.arange(len(depths))
    handles = curves.plot(steps, exact, marker="o", color="tab:orange", label="exact match")
    curves.set_ylim(-0.02, 1.02)
    curves.set_ylabel("exact match", color="tab:orange")
    twin = curves.twinx()
    handles += twin.plot(steps, loss, marker="s", color="tab:blue", label="loss (nats per answer token)")
    use_log_scale(twin, "y")
    twin.set_ylabel("loss", color="tab:blue")
    curves.set_xticks(steps, depths, rotation=30, ha="right")
    curves.set_xlabel("residual stream read at")
    curves.grid(alpha=0.3)
    curves.set_title("answer decoded through the final LayerNorm and head")
    curves.legend(handles=handles, loc="center left", fontsize=8)
    image = _heatmap(grid_ax, accuracy, 0.0, 1.0, depths, positions, ".2f")
    grid_ax.set_xlabel("answer position")
    grid_ax.set_title("accuracy by depth and answer position")
    figure.colorbar(image, ax=grid_ax, label="accuracy", shrink=0.9)
    figure.suptitle(
        f"logit lens on {_field(record, 'examples'):,} held-out sequences (teacher-forced){_at_step(record)}"
    )
    return figure


def patching_picture(record: Mapping[str, Any]) -> Figure:
    """Layer x position: the share of the logit difference restored by patching there, clean into corrupted."""
    restored = _grid(record, "restored")
    positions = list(_field(record, "positions"))
    if restored.shape[1] != len(positions):
        raise VizError(f"'restored' has {restored.shape[1]} positions but 'positions' names {len(positions)}")
    point, corrupted = _field(record, "point"), int(_field(record, "corrupted_position"))
    n_layer, n_positions = restored.shape
    figure = new_figure(2.5 + 0.75 * n_positions, 2.2 + 0.55 * n_layer)
    ax = figure.add_subplot()
    rows = [f"layer {layer}" for layer in range(n_layer)]
    image = _heatmap(ax, restored, min(0.0, restored.min()), max(1.0, restored.max()), rows, positions, ".2f")
    for column, colour in ((corrupted, "tab:red"), (n_positions - 1, "white")):
        ax.add_patch(Rectangle((column - 0.5, -0.5), 1.0, n_layer, fill=False, edgecolor=colour, linewidth=2.0))
    ax.set_xlabel(f"position (red: the corrupted token; white: where answer {record.get('answer_position')} is read)")
    figure.colorbar(image, ax=ax, label="share of logit difference restored", shrink=0.9)
    example = record.get("example") or {}
    pair = f"\ne.g. clean {example['clean']} / corrupted {example['corrupted']}" if "clean" in example else ""
    figure.suptitle(
        f"patching {point}, clean into corrupted, on {_field(record, 'examples'):,} pairs{pair}{_at_step(record)}"
    )
    return figure


def head_reads_picture(record: Mapping[str, Any]) -> Figure:
    """Per head: its mean attention from the answer positions onto a prompt token, by the value just written and the
    prompt token's value, times the prompt length."""
    values = [str(value) for value in _field(record, "values")]
    shape_error = VizError(f"'reads' must be layers x heads x {len(values)} x {len(values)} finite numbers")
    try:
        reads = np.array(_field(record, "reads"), dtype=float)  # (L, H, V, V)
    except (TypeError, ValueError):
        raise shape_error from None
    if reads.ndim != 4 or reads.shape[2:] != (len(values), len(values)) or not np.all(np.isfinite(reads)):
        raise shape_error
    n_layer, n_head = reads.shape[:2]
    on_answer = np.array(_field(record, "on_answer"), dtype=float)
    figure = new_figure(1.2 + 2.6 * n_head, 1.0 + 2.6 * n_layer)
    axes = figure.subplots(n_layer, n_head, squeeze=False)
    high = float(reads.max()) or 1.0
    for (layer, head), ax in np.ndenumerate(axes):
        image = ax.imshow(reads[layer, head], cmap=CMAP, vmin=0.0, vmax=high, interpolation="nearest")
        ax.set_title(f"head {layer}.{head} (on answer {on_answer[layer, head]:.2f})", fontsize=9)
        ax.set_xticks(range(len(values)), values, fontsize=7)
        ax.set_yticks(range(len(values)), values, fontsize=7)
        if layer == n_layer - 1:
            ax.set_xlabel("prompt token's value", fontsize=8)
        if head == 0:
            ax.set_ylabel("value just written", fontsize=8)
    figure.colorbar(image, ax=axes, label="mean weight x prompt length", shrink=0.8)
    figure.suptitle(
        f"what each head reads from the answer positions, on {_field(record, 'examples'):,} held-out sequences"
        f"{_at_step(record)}"
    )
    return figure


def most_needed_head(record: Mapping[str, Any]) -> tuple[int, int]:
    """The (layer, head) whose zero ablation costs the metric most: the head the explorers open on."""
    zero = _grid(record, "zero")
    sign = 1.0 if record.get("higher_is_better", True) else -1.0
    layer, head = np.unravel_index(np.argmin(sign * zero), zero.shape)  # argmin takes the first of equals
    return int(layer), int(head)
