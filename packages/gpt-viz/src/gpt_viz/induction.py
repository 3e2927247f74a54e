"""Induction heads forming (Olsson et al. 2022): at one step the loss and the in-context-learning score fall as
second-layer heads start to attend from a repeated token to the token after its earlier occurrence; drawn from the
induction probes' keys of any run that logs them."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from gpt_viz.canvas import caption_below, new_figure
from gpt_viz.errors import VizError
from gpt_viz.run_data import PathLike, Record, available_metrics, load_metrics, metric_series, run_directory
from gpt_viz.run_layout import HELDOUT, metric_key, probe_key

_HEAD = re.compile(r"^heldout_probe_(?P<kind>induction|previous_token)_l(?P<layer>\d+)h(?P<head>\d+)$")


def head_keys(records: Sequence[Record], kind: str) -> dict[tuple[int, int], str]:
    matches = [match for key in available_metrics(records) if (match := _HEAD.match(key)) and match["kind"] == kind]
    return dict(sorted(((int(match["layer"]), int(match["head"])), match[0]) for match in matches))


def induction_formation(
    run: PathLike | Sequence[Record], *, loss: str = "loss", phase_step: int | None = None, title: str = ""
) -> Figure:
    """Held-out `loss`, the ICL score, each head's induction score (the last layer's in colour) and the first
    layer's previous-token scores against the step; `phase_step`, where the phase change was found, dashed."""
    if isinstance(run, (str, os.PathLike)):
        source, records = str(run_directory(run)), load_metrics(run)
    else:
        source, records = "the records", list(run)
    induction, previous = head_keys(records, "induction"), head_keys(records, "previous_token")
    if not induction:
        raise VizError(f"{source} logs no induction probes (heldout_probe_induction_l<layer>h<head>)")
    last = max(layer for layer, _ in induction)
    figure = new_figure(8.0, 9.6)
    axes = list(figure.subplots(4, 1, sharex=True, height_ratios=[2, 2, 3, 2], squeeze=False)[:, 0])
    steps, values = metric_series(records, metric_key(HELDOUT, loss), source=source)
    axes[0].plot(steps, values, color="tab:red", linewidth=1.4, label=f"held-out {loss.replace('_', ' ')}")
    axes[0].set_ylabel(loss.replace("_", " "))
    steps, values = metric_series(records, probe_key("icl_score"), source=source)
    axes[1].plot(steps, values, color="tab:purple", linewidth=1.4, label="ICL score: loss late minus early")
    axes[1].axhline(0.0, color="0.5", linewidth=0.8, linestyle=":")
    axes[1].set_ylabel("ICL score (nats)")
    for (layer, head), key in induction.items():
        steps, values = metric_series(records, key, source=source)
        style = {"linewidth": 1.6, "label": f"layer {layer} head {head}"}
        if layer != last:
            style = {"color": "0.7", "linewidth": 1.0, "label": f"layer {layer} head {head}" if head == 0 else None}
        axes[2].plot(steps, values, **style)
    axes[2].set_ylabel("induction score")
    axes[2].set_ylim(-0.02, 1.02)
    for (layer, head), key in previous.items():
        if layer == 0:
            steps, values = metric_series(records, key, source=source)
            axes[3].plot(steps, values, linewidth=1.4, label=f"layer 0 head {head}")
    axes[3].set_ylabel("previous-token score")
    axes[3].set_ylim(-0.02, 1.02)
    axes[3].set_xlabel("step")
    for ax in axes:
        if phase_step is not None:
            ax.axvline(phase_step, color="0.3", linestyle="--", linewidth=1.0)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", frameon=False, fontsize=8)
    phase = f"; phase change at step {phase_step}" if phase_step is not None else ""
    axes[0].set_title((title or "induction heads forming") + phase)
    caption_below(figure, *LOOK_AT)
    return figure


LOOK_AT = (
    "Look for one step where the loss and the ICL score fall together as a last-layer head's induction score jumps:",
    "an induction head forming. It copies the token that followed the current token's earlier occurrence,",
    "finding it through a layer-0 previous-token head (bottom), whose score rises with it.",
)

# A sharp move happens within SPAN of the run's steps, covers at least SHARE of the series' range and at least
# MIN_MOVE (score units, or nats for the ICL score), so that a flat, noisy series has none.
SPAN, SHARE, MIN_MOVE = 0.1, 0.5, 0.1
PREVIOUS_TOKEN = INDUCTION = 0.5  # the share of its attention going where its score reads that makes a head one


@dataclass(frozen=True)
class Move:
    """values[end] - values[start] = size; `at`: the first step past the middle of the move."""

    start: int
    end: int
    size: float
    at: int


@dataclass(frozen=True)
class PhaseChange:
    """Where the ICL score falls as `head`'s induction score rises (`rise`: that move's evaluations), and the first
    step a layer-0 previous-token head forms."""

    step: int
    head: tuple[int, int]
    induction_move: float
    icl_move: float
    previous_token_step: int | None
    rise: tuple[int, int]


def sharpest_move(steps: np.ndarray, values: np.ndarray, sign: int, span: float = SPAN) -> Move | None:
    """The largest change in direction `sign` (+1 rise, -1 fall) within `span` of the run's steps, if it is sharp."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=float)
    if len(steps) < 2:
        return None
    width = span * (steps[-1] - steps[0])
    best = None
    for i in range(len(steps)):
        for j in range(i + 1, len(steps)):
            if steps[j] - steps[i] > width:
                break
            candidate = (sign * (values[j] - values[i]), steps[i] - steps[j], i, j)  # ties: the shortest
            best = candidate if best is None or candidate[:2] > best[:2] else best
    if best is None:  # no two evaluations within the span
        return None
    change, _, i, j = best
    if change < max(SHARE * (values.max() - values.min()), MIN_MOVE):
        return None
    middle = (values[i] + values[j]) / 2
    past = next(k for k in range(i + 1, j + 1) if sign * (values[k] - middle) >= 0)
    return Move(int(steps[i]), int(steps[j]), float(values[j] - values[i]), int(steps[past]))


def phase_change(records: Sequence[Record]) -> PhaseChange | None:
    """The last layer's head whose induction score rises most sharply, to at least INDUCTION, as the ICL score falls."""
    icl = sharpest_move(*metric_series(records, probe_key("icl_score")), sign=-1)
    induction = head_keys(records, "induction")
    if icl is None or not induction:
        return None
    last = max(layer for layer, _ in induction)
    rises = {}
    for (layer, head), key in induction.items():
        steps, values = metric_series(records, key)
        move = sharpest_move(steps, values, sign=+1)
        if move is None or layer != last or values[steps == move.end][0] < INDUCTION:
            continue
        if move.start <= icl.end and icl.start <= move.end:
            rises[layer, head] = move
    if not rises:
        return None
    head, move = max(rises.items(), key=lambda item: item[1].size)
    return PhaseChange(move.at, head, move.size, icl.size, previous_token_step(records), (move.start, move.end))


def previous_token_step(records: Sequence[Record]) -> int | None:
    keys = [key for (layer, _), key in head_keys(records, "previous_token").items() if layer == 0]
    return next((int(r["step"]) for r in records if any(r.get(key, 0.0) >= PREVIOUS_TOKEN for key in keys)), None)
