"""Attention heatmaps: query positions down the y axis, key positions across.

With the query on the y axis and position 0 at the top, a causal model's
weights form a lower triangle (nothing above the diagonal), so a broken mask
is visible at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from gpt_viz.canvas import new_figure
from gpt_viz.errors import VizError
from gpt_viz.run_data import check_attention_shape

CMAP = "viridis"
# Above this many positions, tick labels are thinned so they stay legible.
MAX_TICK_LABELS = 48
# Characters that would be invisible or break mathtext as tick labels.
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "$": r"\$"}


def display_token(token: str) -> str:
    """A token as a tick label: whitespace made visible, ``$`` kept out of mathtext."""
    return "".join(_VISIBLE.get(char, char) for char in token)


def draw_attention(ax: Axes, weights_2d: np.ndarray, tokens: Sequence[str], vmax: float | None = None) -> AxesImage:
    """Draw one query × key heatmap on ``ax`` with the tokens as tick labels.

    The colour scale starts at 0 so that masked (future) positions are the
    darkest colour; ``vmax`` lets several heads share one scale.
    """
    weights_2d = np.asarray(weights_2d)
    if weights_2d.ndim != 2:
        raise VizError(f"attention map must be 2-D (query × key), got shape {weights_2d.shape}")
    check_attention_shape(weights_2d, tokens)
    image = ax.imshow(
        weights_2d,
        cmap=CMAP,
        vmin=0.0,
        vmax=vmax if vmax is not None else float(weights_2d.max()),
        interpolation="nearest",
    )
    _label_positions(ax, tokens)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    return image


def _label_positions(ax: Axes, tokens: Sequence[str]) -> None:
    stride = math.ceil(len(tokens) / MAX_TICK_LABELS)
    positions = range(0, len(tokens), stride)
    labels = [display_token(tokens[i]) for i in positions]
    size = _tick_fontsize(len(positions))
    ax.set_xticks(positions, labels, rotation=90, fontsize=size)
    ax.set_yticks(positions, labels, fontsize=size)
    ax.tick_params(length=2, pad=1)


def _tick_fontsize(label_count: int) -> float:
    return max(5.0, min(9.0, 180 / max(label_count, 1)))


def attention_map(weights_2d: np.ndarray, tokens: Sequence[str], title: str = "attention") -> Figure:
    """One attention matrix ``(T, T)`` as a heatmap with a colorbar."""
    figure = new_figure(6.0, 5.4)
    ax = figure.add_subplot()
    image = draw_attention(ax, weights_2d, tokens)
    ax.set_title(title)
    figure.colorbar(image, ax=ax, label="attention weight", shrink=0.85)
    return figure


def attention_grid(weights_layer: np.ndarray, tokens: Sequence[str], layer: int | None = None) -> Figure:
    """Every head of one layer side by side, sharing one colour scale.

    ``weights_layer`` has shape ``(n_head, T, T)``.  A shared scale makes heads
    comparable: a sharp head really is brighter than a diffuse one.
    ``layer`` only labels the figure.
    """
    weights_layer = np.asarray(weights_layer)
    if weights_layer.ndim != 3 or weights_layer.shape[0] == 0:
        raise VizError(f"layer attention must have shape (n_head, T, T) with n_head >= 1, got {weights_layer.shape}")
    n_head = weights_layer.shape[0]
    columns = math.ceil(math.sqrt(n_head))
    rows = math.ceil(n_head / columns)
    figure = new_figure(3.6 * columns + 1.0, 3.5 * rows + 0.5)
    vmax = float(weights_layer.max())
    axes = [figure.add_subplot(rows, columns, head + 1) for head in range(n_head)]
    for head, ax in enumerate(axes):
        image = draw_attention(ax, weights_layer[head], tokens, vmax=vmax)
        ax.set_title(f"head {head}")
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.85)
    figure.suptitle("attention by head" if layer is None else f"layer {layer} attention by head")
    return figure
