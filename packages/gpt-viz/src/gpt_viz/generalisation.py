"""Accuracy by evaluation length for several position encodings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gpt_viz.canvas import new_figure
from gpt_viz.errors import VizError

Score = Sequence[float] | None
NOT_APPLICABLE = "n/a"
TRAINED_MARK = "trained-lengths"  # the gid of the line after the trained lengths
_GROUP_WIDTH = 0.8  # of each length's slot
_LEGEND_WIDTH = 1.8  # inches beside the axes


def length_generalisation(
    results: Mapping[str, Mapping[int, Score]],
    title: str = "accuracy by evaluation length",
    ylabel: str = "accuracy",
    xlabel: str = "evaluation length",
    legend_title: str = "position encoding",
    trained_up_to: int | None = None,
) -> Figure:
    """A group of bars per length, a bar per encoding: ``results`` maps each to ``{length: (mean, std) or None}``;
    None or a missing length is "n/a", never a bar of 0 (learned positions cannot run past their table)."""
    if not results:
        raise VizError("results mapping is empty; expected {encoding: {length: (mean, std) or None}}")
    scores = {name: _normalise(name, by_length) for name, by_length in results.items()}
    lengths = sorted({length for by_length in scores.values() for length in by_length})
    if not lengths:
        raise VizError("results mapping has no evaluation lengths")

    figure = new_figure(max(6.0, 1.0 + 1.1 * len(lengths)) + _LEGEND_WIDTH, 4.8)
    ax = figure.add_subplot()
    top = _axis_top(scores)
    bar_width = _GROUP_WIDTH / len(scores)
    for index, by_length in enumerate(scores.values()):
        offset = (index - (len(scores) - 1) / 2) * bar_width
        colour = f"C{index}"
        for slot, length in enumerate(lengths):
            x = slot + offset
            score = by_length.get(length)
            if score is None:
                ax.text(x, 0.02 * top, NOT_APPLICABLE, rotation=90, ha="center", va="bottom", fontsize=8, color="0.35")
            else:
                mean, std = score
                ax.bar(x, mean, width=bar_width * 0.95, yerr=std, color=colour, capsize=2, error_kw={"elinewidth": 0.8})
    if trained_up_to is not None:
        boundary = sum(length <= trained_up_to for length in lengths) - 0.5
        ax.axvline(boundary, color="0.4", linestyle="--", linewidth=1.0, gid=TRAINED_MARK)
        ax.text(boundary, 0.98 * top, f" trained ≤ {trained_up_to}", ha="left", va="top", fontsize=8, color="0.3")
    ax.set_xticks(range(len(lengths)), [str(length) for length in lengths])
    ax.set_ylim(0.0, top)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    legend_handles = [Patch(color=f"C{i}", label=name) for i, name in enumerate(scores)]
    # Beside the axes, not over them: with several encodings every slot has a tall bar a legend would hide.
    ax.legend(handles=legend_handles, title=legend_title, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return figure


def _normalise(name: str, by_length: Mapping[int, Score]) -> dict[int, tuple[float, float] | None]:
    normalised = {}
    for length, score in by_length.items():
        try:
            normalised[int(length)] = None
        except (TypeError, ValueError):
            raise VizError(f"length {length!r} of {name!r} is not an integer") from None
        if score is not None:
            try:
                mean, std = score
                normalised[int(length)] = float(mean), float(std)
            except (TypeError, ValueError):
                raise VizError(f"results[{name!r}][{length!r}] must be (mean, std) or None, got {score!r}") from None
    return normalised


def _axis_top(scores: Mapping[str, Mapping[int, tuple[float, float] | None]]) -> float:
    """At least 1 so accuracies keep their full 0–1 range; taller if error bars need it."""
    highs = [mean + std for by_length in scores.values() for mean, std in filter(None, by_length.values())]
    return max([1.0, *highs]) * 1.08
