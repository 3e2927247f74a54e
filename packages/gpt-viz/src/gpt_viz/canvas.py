"""Figures on an Agg canvas, without pyplot: drawing works headless, and a figure is freed when the caller drops it."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator

from gpt_viz.errors import VizError, file_target
from gpt_viz.files import write_atomically
from gpt_viz.run_data import PathLike

SAVE_DPI = 150  # sharp on screens and in slides, still small files


def new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


CAPTION_SIZE = 8.5
CAPTION_CHARACTERS_PER_INCH = 16  # of the caption's font: a longer line is wrapped


def caption_below(figure: Figure, *lines: str) -> None:
    """What to look at, under the whole figure, each line wrapped to its width; no lines, no caption."""
    width = int(figure.get_figwidth() * CAPTION_CHARACTERS_PER_INCH)
    text = "\n".join(textwrap.fill(part, width) for line in lines for part in line.splitlines() if part)
    if text:
        figure.supxlabel(text, fontsize=CAPTION_SIZE)


def legend_below(ax: Axes, handles: list | None = None) -> None:
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, frameon=False)


class PlainLogFormatter(LogFormatter):
    """Labels the ticks matplotlib would label on a log axis, but as 0.2, 1, 300 instead of 2×10⁻¹."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain(text: str) -> str:
    """`text` (a run's name, a label) drawn as typed: a "$" would start matplotlib's mathtext."""
    return text.replace("$", r"\$")


def counted(n: int, noun: str) -> str:
    """ "1 head", "4 heads": a count with its noun, in the plural unless it is one."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def lone_marker(steps: np.ndarray) -> str | None:
    """A dot on a series of one point, which a line alone would not show."""
    return "o" if len(steps) < 2 else None


def step_axis(ax: Axes) -> None:
    """Whole steps on a linear step axis, also when a run logged only one."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def use_log_scale(ax: Axes, which: Literal["x", "y"]) -> None:
    """A log axis with plain numbers, so a loss or a step is read off without decoding exponents."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def save_figure(fig: Figure, path: PathLike, formats: Iterable[str] = ("png",)) -> list[Path]:
    """Write ``fig`` once per format, an image suffix of ``path`` replaced by each (``curves.png`` and ``curves`` both
    give ``curves.svg``, and names containing dots survive); return the paths written."""
    supported = fig.canvas.get_supported_filetypes()
    stem = file_target(path, "a picture")
    if stem.suffix.lower().lstrip(".") in supported:
        stem = stem.with_suffix("")
    written = []
    for fmt in (fmt.lower().lstrip(".") for fmt in formats):
        if fmt not in supported:
            raise VizError(f"cannot save as {fmt!r}; supported formats: {', '.join(sorted(supported))}")
        target = stem.with_name(f"{stem.name}.{fmt}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(target, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, dpi=SAVE_DPI))
        except OSError as error:
            raise VizError(f"cannot write {target}: {error.strerror or error}") from error
        except (RuntimeError, ValueError) as error:  # pgf without LaTeX; text matplotlib cannot lay out
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise VizError(f"cannot draw {target} as {fmt}: {first}") from error
        written.append(target)
    return written
