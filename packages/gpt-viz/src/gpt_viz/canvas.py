"""Creating and saving figures without pyplot.

Figures are built with the object-oriented API on an Agg canvas, so drawing
works on a headless machine, never touches pyplot's global figure registry,
and a figure is freed as soon as the caller drops it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from gpt_viz.errors import VizError
from gpt_viz.run_data import PathLike

# Dots per inch of saved raster images: sharp on screens and in slides, still small files.
SAVE_DPI = 150


def new_figure(width: float, height: float) -> Figure:
    """A blank figure on an Agg canvas, laid out so labels do not overlap."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


CAPTION_SIZE = 8.5
CAPTION_CHARACTERS_PER_INCH = 16
"""About how many characters of the caption's font fit in an inch: a longer line is wrapped."""


def caption_below(figure: Figure, *lines: str) -> None:
    """What to look at, in a line or two under the whole figure (the layout makes room for it), each line wrapped
    to the figure's width; no lines, no caption."""
    width = int(figure.get_figwidth() * CAPTION_CHARACTERS_PER_INCH)
    text = "\n".join(textwrap.fill(part, width) for line in lines for part in line.splitlines() if part)
    if text:
        figure.supxlabel(text, fontsize=CAPTION_SIZE)


def legend_below(ax: Axes, handles: list | None = None) -> None:
    """A legend under the axes, where no curve can hide behind it."""
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, frameon=False)


class PlainLogFormatter(LogFormatter):
    """Labels the ticks matplotlib would label on a log axis, but as 0.2, 1, 300 instead of 2×10⁻¹."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def use_log_scale(ax: Axes, which: Literal["x", "y"]) -> None:
    """A log axis with plain numbers, so a loss or a step is read off without decoding exponents."""
    if which == "x":
        ax.set_xscale("log")
        axis = ax.xaxis
    else:
        ax.set_yscale("log")
        axis = ax.yaxis
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def save_figure(fig: Figure, path: PathLike, formats: Iterable[str] = ("png",)) -> list[Path]:
    """Write ``fig`` once per format and return the paths written.

    ``path`` gives the location and name; its suffix is replaced by each format
    when it is an image suffix (``curves.png`` or ``curves`` both give
    ``curves.png`` and ``curves.svg``), so names containing dots survive.
    Parent directories are created.  Raster formats use :data:`SAVE_DPI`.
    """
    supported = fig.canvas.get_supported_filetypes()
    stem = _without_image_suffix(Path(path), supported)
    written = []
    for fmt in formats:
        fmt = fmt.lower().lstrip(".")
        if fmt not in supported:
            raise VizError(f"cannot save as {fmt!r}; supported formats: {', '.join(sorted(supported))}")
        target = stem.with_name(f"{stem.name}.{fmt}")
        _write(fig, target, fmt)
        written.append(target)
    return written


def _without_image_suffix(path: Path, image_suffixes: Iterable[str]) -> Path:
    if path.suffix.lower().lstrip(".") in image_suffixes:
        return path.with_suffix("")
    return path


def _write(fig: Figure, target: Path, fmt: str) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format=fmt, dpi=SAVE_DPI)
    except OSError as error:
        raise VizError(f"cannot write {target}: {error.strerror or error}") from error
