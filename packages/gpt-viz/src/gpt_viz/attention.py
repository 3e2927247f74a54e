"""Attention heatmaps: queries down, keys across, so a causal model's weights form a lower triangle and a broken mask
shows at a glance; a red line on both axes splits the prompt from the answer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from gpt_viz.canvas import CAPTION_SIZE, caption_below, new_figure, plain
from gpt_viz.errors import VizError
from gpt_viz.run_data import check_attention_shape, is_prompt_length

CMAP = "viridis"
MAX_TICK_LABELS = 48  # above it, tick labels are thinned so they stay legible
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥"}  # invisible as tick labels
BOUNDARY_COLOUR = "red"  # the prompt/answer line: red stands out on all of viridis
READING = "Each row: the position that reads (query). A bright cell: the position it reads (key)."
BOUNDARY = "Red lines: the prompt ends and the answer begins; below them, what each answer position reads."


def display_token(token: str) -> str:
    shown = (_VISIBLE.get(char) or (char if char.isprintable() else ascii(char)[1:-1]) for char in token)
    return plain("".join(shown))  # a control or format character (U+2028, U+202E) as its escape


def draw_attention(
    ax: Axes, weights_2d: np.ndarray, tokens: Sequence[str], vmax: float | None = None, prompt_length: int | None = None
) -> AxesImage:
    """One query × key heatmap, its colours from 0 (so masked positions are the darkest) to ``vmax``."""
    weights_2d = np.asarray(weights_2d)
    if weights_2d.ndim != 2:
        raise VizError(f"attention map must be 2-D (query × key), got shape {weights_2d.shape}")
    check_attention_shape(weights_2d, tokens)
    top = vmax if vmax is not None else float(weights_2d.max())
    image = ax.imshow(weights_2d, cmap=CMAP, vmin=0.0, vmax=top, interpolation="nearest")
    stride = math.ceil(len(tokens) / MAX_TICK_LABELS)
    positions = range(0, len(tokens), stride)
    labels = [display_token(tokens[i]) for i in positions]
    size = max(5.0, min(9.0, 180 / max(len(positions), 1)))
    ax.set_xticks(positions, labels, rotation=90, fontsize=size)
    ax.set_yticks(positions, labels, fontsize=size)
    ax.tick_params(length=2, pad=1)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if prompt_length is not None:
        if not is_prompt_length(prompt_length, len(tokens)):
            raise VizError(
                f"prompt_length must be a whole number from 1 to the {len(tokens)} positions, got {prompt_length!r}"
            )
        if prompt_length < len(tokens):  # a line between prompt and answer; none when the whole sequence is prompt
            for draw in (ax.axvline, ax.axhline):
                draw(prompt_length - 0.5, color=BOUNDARY_COLOUR, linewidth=1.3)
    return image


def caption(prompt_length: int | None, positions: int) -> str:
    return READING + (f"\n{BOUNDARY}" if prompt_length is not None and prompt_length < positions else "")


def caption_axes(ax: Axes, prompt_length: int | None, positions: int) -> None:
    """The caption under a heatmap's x label, for a heatmap sharing its figure."""
    ax.annotate(
        caption(prompt_length, positions),
        xy=(0.5, 0.0),
        xycoords=ax.xaxis.label,
        xytext=(0, -4),
        textcoords="offset points",
        ha="center",
        va="top",
        fontsize=CAPTION_SIZE,
    )


def attention_map(
    weights_2d: np.ndarray, tokens: Sequence[str], title: str = "attention", prompt_length: int | None = None
) -> Figure:
    figure = new_figure(6.4, 5.8)
    ax = figure.add_subplot()
    image = draw_attention(ax, weights_2d, tokens, prompt_length=prompt_length)
    ax.set_title(title)
    figure.colorbar(image, ax=ax, label="attention weight", shrink=0.85)
    caption_below(figure, caption(prompt_length, len(tokens)))
    return figure


def attention_grid(
    weights_layer: np.ndarray, tokens: Sequence[str], layer: int | None = None, prompt_length: int | None = None
) -> Figure:
    """Every head of one layer (n_head, T, T) on one colour scale, so a sharp head really is brighter than a diffuse
    one."""
    weights_layer = np.asarray(weights_layer)
    if weights_layer.ndim != 3 or weights_layer.shape[0] == 0:
        raise VizError(f"layer attention must have shape (n_head, T, T) with n_head >= 1, got {weights_layer.shape}")
    n_head = weights_layer.shape[0]
    columns = math.ceil(math.sqrt(n_head))
    rows = math.ceil(n_head / columns)
    figure = new_figure(max(3.6 * columns + 1.0, 6.4), 3.5 * rows + 0.9)
    vmax = float(weights_layer.max())
    axes = [figure.add_subplot(rows, columns, head + 1) for head in range(n_head)]
    for head, ax in enumerate(axes):
        image = draw_attention(ax, weights_layer[head], tokens, vmax=vmax, prompt_length=prompt_length)
        ax.set_title(f"head {head}")
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.85)
    figure.suptitle("attention by head" if layer is None else f"layer {layer} attention by head")
    caption_below(figure, caption(prompt_length, len(tokens)))
    return figure
