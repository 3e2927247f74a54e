"""Accuracy by evaluation length per position encoding; "not applicable" is not zero."""

import pytest

from gpt_viz import VizError, length_generalisation
from gpt_viz.generalisation import NOT_APPLICABLE, TRAINED_MARK

RESULTS = {
    "learned": {16: (0.98, 0.01), 32: (0.95, 0.02), 64: None, 128: None},
    "sinusoidal": {16: (0.99, 0.01), 32: (0.6, 0.1), 64: (0.2, 0.05), 128: (0.05, 0.02)},
    "rope": {16: (1.0, 0.0), 32: (0.9, 0.03), 64: (0.5, 0.1), 128: (0.3, 0.1)},
}


def only_axes(figure):
    (ax,) = figure.axes
    return ax


def na_texts(ax):
    return [text for text in ax.texts if text.get_text() == NOT_APPLICABLE]


def test_length_generalisation_renders_as_a_real_picture(assert_real_picture):
    assert_real_picture(length_generalisation(RESULTS))


def test_none_is_shown_as_na_not_as_a_zero_bar():
    ax = only_axes(length_generalisation(RESULTS))
    assert len(na_texts(ax)) == 2
    assert len(ax.patches) == 10  # 12 slots, 2 of them not applicable
    assert all(patch.get_height() > 0 for patch in ax.patches)


def test_na_sits_where_the_missing_bar_would_be():
    ax = only_axes(length_generalisation(RESULTS))
    learned_bar_at_32 = min(ax.patches, key=lambda bar: bar.get_x())  # leftmost bar of group 16
    na_positions = sorted(text.get_position()[0] for text in na_texts(ax))
    bar_centre = learned_bar_at_32.get_x() + learned_bar_at_32.get_width() / 2
    assert na_positions == pytest.approx([bar_centre + 2, bar_centre + 3])


def test_lengths_are_grouped_in_increasing_order_with_readable_labels():
    ax = only_axes(length_generalisation(RESULTS))
    assert [label.get_text() for label in ax.get_xticklabels()] == ["16", "32", "64", "128"]
    assert ax.get_xlabel() == "evaluation length"
    assert ax.get_ylabel() == "accuracy"


def test_legend_names_every_encoding_beside_the_bars():
    legend = only_axes(length_generalisation(RESULTS)).get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["learned", "sinusoidal", "rope"]
    figure = legend.figure
    figure.canvas.draw()
    axes_box, legend_box = only_axes(figure).get_window_extent(), legend.get_window_extent()
    assert legend_box.x0 >= axes_box.x1  # right of the axes: it cannot hide a bar


def test_lengths_from_json_keys_and_absent_lengths_are_accepted():
    results = {"learned": {"16": [0.9, 0.1]}, "rope": {"16": [0.95, 0.0], "32": [0.8, 0.1]}}
    ax = only_axes(length_generalisation(results))
    assert [label.get_text() for label in ax.get_xticklabels()] == ["16", "32"]
    assert len(na_texts(ax)) == 1  # learned has no result at 32


def test_empty_results_are_an_error():
    with pytest.raises(VizError, match="results mapping is empty"):
        length_generalisation({})


def test_results_without_any_length_are_an_error():
    with pytest.raises(VizError, match="no evaluation lengths"):
        length_generalisation({"rope": {}})


def test_a_score_that_is_not_mean_and_std_is_an_error():
    with pytest.raises(VizError, match=r"results\['rope'\]\[16\] must be \(mean, std\) or None, got 0.9"):
        length_generalisation({"rope": {16: 0.9}})


def test_a_length_that_is_not_an_integer_is_an_error():
    with pytest.raises(VizError, match="length 'long' of 'rope' is not an integer"):
        length_generalisation({"rope": {"long": (0.5, 0.1)}})


def test_trained_lengths_are_marked_off_from_the_longer_ones():
    ax = only_axes(length_generalisation(RESULTS, trained_up_to=32))
    (line,) = marks(ax)
    assert list(line.get_xdata()) == [1.5, 1.5]  # between the groups of 32 and 64
    assert [text.get_text() for text in ax.texts if "trained" in text.get_text()] == [" trained ≤ 32"]
    assert not marks(only_axes(length_generalisation(RESULTS)))


def marks(ax):
    return [line for line in ax.get_lines() if line.get_gid() == TRAINED_MARK]
