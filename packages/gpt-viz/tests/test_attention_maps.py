"""Attention heatmaps: queries down, keys across, tokens as labels, causal triangle visible."""

import numpy as np
import pytest

from gpt_viz import VizError, attention_grid, attention_map
from gpt_viz.attention import BOUNDARY, MAX_TICK_LABELS, READING, display_token


def heatmap_axes(figure):
    return [ax for ax in figure.axes if ax.get_images()]


def causal_map(length):
    """Uniform attention over the visible prefix: the simplest causal pattern."""
    weights = np.tril(np.ones((length, length)))
    return weights / weights.sum(axis=1, keepdims=True)


def test_attention_map_renders_as_a_real_picture(layer_weights, tokens, assert_real_picture):
    assert_real_picture(attention_map(layer_weights[0], tokens))


def test_attention_map_puts_queries_down_and_keys_across(layer_weights, tokens):
    figure = attention_map(layer_weights[0], tokens, title="head 0")
    (ax,) = heatmap_axes(figure)
    assert ax.get_xlabel() == "key position"
    assert ax.get_ylabel() == "query position"
    bottom, top = ax.get_ylim()
    assert top < bottom  # query 0 at the top, so a causal map is a lower triangle
    assert ax.get_title() == "head 0"


def test_attention_map_shows_the_causal_lower_triangle(layer_weights, tokens):
    (ax,) = heatmap_axes(attention_map(layer_weights[0], tokens))
    shown = np.asarray(ax.get_images()[0].get_array())
    assert np.all(np.triu(shown, k=1) == 0)
    assert np.all(np.diag(shown) > 0)


def test_attention_map_has_a_colorbar_starting_at_zero(layer_weights, tokens):
    figure = attention_map(layer_weights[0], tokens)
    assert len(figure.axes) == 2
    (ax,) = heatmap_axes(figure)
    assert ax.get_images()[0].get_clim()[0] == 0.0


def test_tokens_are_tick_labels_with_whitespace_made_visible(layer_weights, tokens):
    (ax,) = heatmap_axes(attention_map(layer_weights[0], tokens))
    x_labels = [label.get_text() for label in ax.get_xticklabels()]
    y_labels = [label.get_text() for label in ax.get_yticklabels()]
    assert x_labels == y_labels == [display_token(token) for token in tokens]
    assert y_labels[:3] == ["1", "2", "+"]
    assert y_labels[-2:] == ["␣", r"\$"]


def test_display_token_escapes_mathtext_and_shows_newlines():
    assert display_token("a$b\n") == "a\\$b↵"


def test_display_token_shows_invisible_characters_and_lone_surrogates_as_escapes():
    assert display_token("\u2028\u202e\x01\udce9 ") == "\\u2028\\u202e\\x01\\udce9␣"


def test_long_sequences_get_thinned_tick_labels():
    length = 3 * MAX_TICK_LABELS
    (ax,) = heatmap_axes(attention_map(causal_map(length), [str(i) for i in range(length)]))
    assert len(ax.get_xticklabels()) == MAX_TICK_LABELS
    assert ax.get_xticklabels()[1].get_text() == "3"


def test_attention_grid_draws_one_heatmap_per_head(layer_weights, tokens, assert_real_picture):
    figure = attention_grid(layer_weights, tokens, layer=3)
    axes = heatmap_axes(figure)
    assert [ax.get_title() for ax in axes] == ["head 0", "head 1", "head 2", "head 3"]
    assert figure.get_suptitle() == "layer 3 attention by head"
    assert_real_picture(figure)


def test_attention_grid_heads_share_one_colour_scale(layer_weights, tokens):
    axes = heatmap_axes(attention_grid(layer_weights, tokens))
    limits = [ax.get_images()[0].get_clim() for ax in axes]
    assert limits == [(0.0, pytest.approx(float(layer_weights.max())))] * 4


def test_attention_map_rejects_non_square_weights(layer_weights, tokens):
    with pytest.raises(VizError, match=r"shape \(10, 9\) are not square"):
        attention_map(layer_weights[0][:, :9], tokens)


def test_attention_map_rejects_weights_that_do_not_match_the_tokens(layer_weights, tokens):
    with pytest.raises(VizError, match="cover 10 positions but there are 9 tokens"):
        attention_map(layer_weights[0], tokens[:9])


def test_attention_map_rejects_a_stack_of_heads(layer_weights, tokens):
    with pytest.raises(VizError, match=r"must be 2-D \(query × key\)"):
        attention_map(layer_weights, tokens)


def test_attention_grid_rejects_a_single_matrix(layer_weights, tokens):
    with pytest.raises(VizError, match=r"must have shape \(n_head, T, T\)"):
        attention_grid(layer_weights[0], tokens)


# what the picture says to look at ------------------------------------------------------------
def boundary_lines(ax):
    """The prompt/answer lines of a heatmap: the x of each vertical one, the y of each horizontal one."""
    lines = [(list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()]
    vertical = sorted(xs[0] for xs, _ in lines if xs[0] == xs[1])
    horizontal = sorted(ys[0] for _, ys in lines if ys[0] == ys[1])
    return vertical, horizontal


def caption_of(figure) -> str:
    return figure.get_supxlabel()


def test_the_prompt_answer_boundary_is_a_line_on_both_axes_between_the_prompt_and_the_answer(layer_weights, tokens):
    (ax,) = heatmap_axes(attention_map(layer_weights[0], tokens, prompt_length=3))
    assert boundary_lines(ax) == ([2.5], [2.5])  # after the third token, position 2


def test_a_map_without_a_prompt_length_or_all_prompt_draws_no_boundary(layer_weights, tokens):
    for prompt_length in (None, len(tokens)):
        (ax,) = heatmap_axes(attention_map(layer_weights[0], tokens, prompt_length=prompt_length))
        assert ax.get_lines() == []


def test_the_caption_says_what_a_row_and_a_bright_cell_are_and_what_the_lines_mark(layer_weights, tokens):
    plain = caption_of(attention_map(layer_weights[0], tokens))
    assert plain.splitlines() == [READING]
    assert "row: the position that reads" in READING and "bright cell: the position it reads" in READING
    marked = caption_of(attention_map(layer_weights[0], tokens, prompt_length=3))
    assert marked.splitlines() == [READING, BOUNDARY]


def test_every_head_of_a_grid_marks_the_boundary_under_one_caption(layer_weights, tokens, assert_real_picture):
    figure = attention_grid(layer_weights, tokens, layer=0, prompt_length=4)
    assert [boundary_lines(ax) for ax in heatmap_axes(figure)] == [([3.5], [3.5])] * 4
    assert caption_of(figure).splitlines() == [READING, BOUNDARY]
    assert_real_picture(figure)


@pytest.mark.parametrize("prompt_length", [0, 11, 2.5, True])
def test_a_prompt_length_outside_the_positions_is_one_line(layer_weights, tokens, prompt_length):
    with pytest.raises(VizError, match="prompt_length must be"):
        attention_map(layer_weights[0], tokens, prompt_length=prompt_length)
