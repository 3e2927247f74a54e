"""Grokking's three phases (Nanda et al. 2023), memorisation, circuit formation and cleanup, found from the
accuracies alone and drawn with the progress measures that separate them, so the two can be compared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

import numpy as np
from matplotlib.figure import Figure

from gpt_viz.canvas import caption_below, new_figure, use_log_scale
from gpt_viz.errors import VizError
from gpt_viz.run_data import THRESHOLD, Record, metric_series
from gpt_viz.run_layout import HELDOUT, TRAIN, metric_key

LEFT_CHANCE = 0.10  # held-out accuracy that starts cleanup: above it the held-out loss has begun its fall
MEASURES = ("restricted_loss", "excluded_loss", "weight_norm")


@dataclass(frozen=True)
class Phases:
    """The steps that end memorisation, circuit formation and cleanup; None where the run never got there."""

    fit: int | None
    cleanup: int | None
    generalised: int | None


def first_at_least(records: Sequence[Record], key: str, threshold: float, after: int = 0) -> int | None:
    """The first logged step from `after` on at which `key` reaches `threshold`; None if it never does."""
    return next((int(r["step"]) for r in records if r["step"] >= after and r.get(key, -1.0) >= threshold), None)


def grokking_phases(records: Sequence[Record]) -> Phases:
    train, heldout = metric_key(TRAIN, "accuracy"), metric_key(HELDOUT, "accuracy")
    fit = first_at_least(records, train, THRESHOLD)  # t_fit
    cleanup = None if fit is None else first_at_least(records, heldout, LEFT_CHANCE, after=fit)
    generalised = None if cleanup is None else first_at_least(records, heldout, THRESHOLD, after=cleanup)
    return Phases(fit, cleanup, generalised)


def first_below(records: Sequence[Record], key: str, threshold: float) -> int | None:
    return next((int(r["step"]) for r in records if key in r and r[key] <= threshold), None)


_PHASE_SHADES = (("memorisation", "tab:blue"), ("circuit formation", "tab:orange"), ("cleanup", "tab:green"))


def progress_measures(records: Sequence[Record], *, title: str = "") -> Figure:
    """Accuracy, the four losses and the weight norm against the step, each phase shaded."""
    missing = [key for key in MEASURES if not any(key in r for r in records)]
    if missing:
        raise VizError(f"the records hold no {', '.join(missing)} (grokking's progress measures)")
    phases = grokking_phases(records)
    figure = new_figure(8.0, 8.5)
    axes = list(figure.subplots(3, 1, sharex=True, height_ratios=[2, 3, 2], squeeze=False)[:, 0])
    for split, name, colour in ((TRAIN, "train", "tab:blue"), (HELDOUT, "held-out", "tab:red")):
        steps, values = metric_series(records, metric_key(split, "accuracy"))
        axes[0].plot(steps, values, color=colour, linewidth=1.4, label=f"{name} accuracy")
    axes[0].set_ylabel("accuracy")
    axes[0].set_ylim(-0.02, 1.05)
    curves = (
        (metric_key(TRAIN, "loss"), "train loss", "tab:blue", "-"),
        (metric_key(HELDOUT, "loss"), "held-out loss", "tab:red", "-"),
        ("restricted_loss", "restricted loss (held-out, key frequencies only)", "tab:purple", "-"),
        ("excluded_loss", "excluded loss (train, key frequencies removed)", "tab:brown", "--"),
    )
    for key, label, colour, style in curves:
        steps, values = metric_series(records, key)
        axes[1].plot(steps, np.maximum(values, 1e-6), color=colour, linestyle=style, linewidth=1.3, label=label)
    use_log_scale(axes[1], "y")
    axes[1].set_ylabel("loss (nats, log scale)")
    steps, values = metric_series(records, "weight_norm")
    axes[2].plot(steps, values, color="0.2", linewidth=1.4, label="weight norm")
    axes[2].set_ylabel("weight norm")
    axes[2].set_xlabel("step")
    last = float(max(r["step"] for r in records))
    edges = [0.0, *(float(b) if b is not None else last for b in astuple(phases))]
    for ax in axes:
        for (name, colour), start, end in zip(_PHASE_SHADES, edges[:-1], edges[1:], strict=True):
            if end > start:
                ax.axvspan(start, end, color=colour, alpha=0.08, label=name if ax is axes[2] else None)
        ax.grid(alpha=0.3)
    for ax, where in zip(axes, ("center right", "lower left", "upper right"), strict=True):
        ax.legend(loc=where, frameon=False, fontsize=8)
    names = ("t_fit", "cleanup from", "t_gen")
    bounds = ", ".join(f"{n} {'-' if b is None else b}" for n, b in zip(names, astuple(phases), strict=True))
    axes[0].set_title((title or "grokking's phases") + f"\n{bounds}")
    caption_below(figure, LOOK_AT)
    return figure


LOOK_AT = (
    "Look at circuit formation (orange): the restricted loss (purple) falls while the held-out loss (red) stays high, "
    "and the excluded loss (dashed) rises; in cleanup (green) the held-out loss and the weight norm fall."
)
