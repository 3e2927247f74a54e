"""The Fourier spectra picture: one panel per moment, shares of power per frequency, the top ones marked."""

import numpy as np
import pytest

from gpt_viz import VizError, fourier_spectra


def spectrum(peaks: dict[int, float], n: int = 57, floor: float = 0.0) -> list[float]:
    """Power at frequencies 0..n-1: `floor` everywhere, plus the given peaks (frequency 0 large, to be left out)."""
    power = np.full(n, floor)
    power[0] = 1000.0
    for k, value in peaks.items():
        power[k] += value
    return power.tolist()


def bar_heights(ax):
    return np.array([patch.get_height() for patch in ax.patches])


def test_each_panel_shows_shares_of_the_non_constant_power():
    figure = fourier_spectra({"init": spectrum({}, floor=2.0), "grokked": spectrum({3: 6.0, 40: 2.0})})
    init, grokked = figure.axes
    assert len(bar_heights(init)) == 56  # frequencies 1..56; 0 is left out
    assert np.allclose(bar_heights(init), 1 / 56)
    heights = bar_heights(grokked)
    assert heights[2] == pytest.approx(0.75) and heights[39] == pytest.approx(0.25)  # k = 3 and k = 40
    assert grokked.get_title() == "grokked: 100% of the power in the top 5 frequencies"
    assert init.get_title() == "init: 9% of the power in the top 5 frequencies"


def test_the_top_frequencies_are_labelled_with_their_k():
    figure = fourier_spectra({"after": spectrum({k: float(k) for k in (4, 9, 14, 20, 33, 41)}, floor=0.1)}, top=3)
    (ax,) = figure.axes
    assert sorted(int(text.get_text()) for text in ax.texts) == [20, 33, 41]
    assert ax.get_xlabel().startswith("frequency k")


def test_the_picture_is_real(assert_real_picture):
    assert_real_picture(fourier_spectra({"a": spectrum({5: 1.0}, floor=0.2), "b": spectrum({7: 3.0}, floor=0.1)}))


@pytest.mark.parametrize(
    "spectra, message",
    [
        ({}, "needs at least one spectrum"),
        ({"a": [1.0]}, "spectrum 'a' must be a list of powers"),
        ({"a": [1.0, -1.0, 2.0]}, "spectrum 'a' holds a negative or non-finite power"),
        ({"a": [1.0, float("nan")]}, "spectrum 'a' holds a negative or non-finite power"),
        ({"a": [5.0, 0.0, 0.0]}, "spectrum 'a' has no power at any frequency above 0"),
        ({"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0]}, r"different lengths \(\[2, 3\] frequencies\)"),
    ],
)
def test_bad_spectra_are_refused_in_one_line(spectra, message):
    with pytest.raises(VizError, match=message):
        fourier_spectra(spectra)
