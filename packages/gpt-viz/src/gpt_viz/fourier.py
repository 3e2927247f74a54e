"""Fourier spectra of an embedding of 0..p-1 (from gpt-tasks' ``fourier_spectrum``): a network that has grokked
modular addition writes each number a as waves cos, sin(2 pi k a / p) at a few frequencies k (Nanda et al. 2023)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from gpt_viz.canvas import new_figure
from gpt_viz.errors import VizError

TOP = 5


def fourier_spectra(spectra: Mapping[str, Sequence[float]], top: int = TOP) -> Figure:
    """A panel per spectrum (power at k = 0 .. p // 2), as shares of the power at k >= 1 (the mean says nothing about
    which number is which) so weights of any size compare; the ``top`` strongest frequencies in colour."""
    if not spectra:
        raise VizError("fourier_spectra needs at least one spectrum, as {label: power per frequency}")
    shares = {label: _share_per_frequency(label, power) for label, power in spectra.items()}
    lengths = {len(share) + 1 for share in shares.values()}  # with frequency 0, as given
    if len(lengths) != 1:
        raise VizError(f"the spectra have different lengths ({sorted(lengths)} frequencies); give one p throughout")
    figure = new_figure(8.0, 1.0 + 2.0 * len(shares))
    axes = figure.subplots(len(shares), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, (label, share) in zip(axes, shares.items(), strict=True):
        frequencies = np.arange(1, len(share) + 1)
        strongest = np.argsort(share)[::-1][:top]
        colours = np.where(np.isin(np.arange(len(share)), strongest), "tab:red", "0.6")
        ax.bar(frequencies, share, color=colours, width=0.8)
        for index in strongest:
            ax.annotate(str(index + 1), (frequencies[index], share[index]), xytext=(0, 2), textcoords="offset points",
                        ha="center", fontsize=8, color="tab:red")  # fmt: skip
        ax.set_title(f"{label}: {share[strongest].sum():.0%} of the power in the top {top} frequencies", fontsize=10)
        ax.set_ylabel("share of power")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 1.15 * max(float(share.max()) for share in shares.values()))
    axes[-1].set_xlabel("frequency k (waves cos, sin of 2π k a / p)")
    return figure


def _share_per_frequency(label: str, power: Sequence[float]) -> np.ndarray:
    values = np.asarray(power, dtype=np.float64)
    if values.ndim != 1 or values.size < 2:
        raise VizError(
            f"spectrum {label!r} must be a list of powers at frequencies 0, 1, ...; got shape {values.shape}"
        )
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise VizError(f"spectrum {label!r} holds a negative or non-finite power")
    waves = values[1:]
    if waves.sum() == 0:
        raise VizError(f"spectrum {label!r} has no power at any frequency above 0")
    return waves / waves.sum()
