"""The headline figure: loss and held-out metric, beside the last layer's attention."""

import numpy as np
import pytest

from gpt_viz import VizError, load_attention, save_attention_examples, training_curves
from gpt_viz.attention import BOUNDARY, READING, display_token


def axes_with_xlabel(figure, label):
    return [ax for ax in figure.axes if ax.get_xlabel() == label]


def twin_of(figure, ax):
    (twin,) = [other for other in figure.axes if other is not ax and other.bbox.bounds == ax.bbox.bounds]
    return twin


def test_curves_with_attention_render_as_a_real_picture(run_dir, assert_real_picture):
    assert_real_picture(training_curves(run_dir))


def test_loss_is_on_a_log_axis_against_step(run_dir):
    (loss_ax,) = axes_with_xlabel(training_curves(run_dir), "step")
    assert loss_ax.get_ylabel() == "training loss"
    assert loss_ax.get_yscale() == "log"


def test_primary_metric_from_config_is_on_the_twin_axis(run_dir):
    figure = training_curves(run_dir)
    (loss_ax,) = axes_with_xlabel(figure, "step")
    twin = twin_of(figure, loss_ax)
    assert twin.get_ylabel() == "heldout_exact_match"
    (line,) = twin.get_lines()
    assert line.get_xdata().tolist() == list(range(0, 501, 50))


def test_metric_argument_overrides_the_config(run_dir):
    figure = training_curves(run_dir, metric="heldout_accuracy")
    (loss_ax,) = axes_with_xlabel(figure, "step")
    assert twin_of(figure, loss_ax).get_ylabel() == "heldout_accuracy"


def test_a_held_out_loss_shares_the_training_losss_axis(run_dir):
    """On a log twin axis of its own, a held-out loss below the training loss was drawn above it."""
    figure = training_curves(run_dir, metric="heldout_loss")
    (loss_ax,) = axes_with_xlabel(figure, "step")
    assert [line.get_label() for line in loss_ax.get_lines()] == ["training loss", "heldout_loss"]
    assert [other for other in figure.axes if other.bbox.bounds == loss_ax.bbox.bounds] == [loss_ax]


def test_lr_is_not_drawn_on_the_fixed_axis_of_fractions(run_dir):
    figure = training_curves(run_dir, metric="lr")
    (loss_ax,) = axes_with_xlabel(figure, "step")
    assert twin_of(figure, loss_ax).get_ylim()[1] < 0.5


def test_a_run_of_one_logged_step_shows_its_point_on_whole_steps(make_run):
    """A line through one point draws nothing: a run stopped before its second log looked empty."""
    run = make_run()
    first = (run / "metrics.jsonl").read_text().splitlines()[0]
    (run / "metrics.jsonl").write_text(first + "\n")
    figure = training_curves(run, metric="loss")
    (loss_ax,) = axes_with_xlabel(figure, "step")
    assert {line.get_marker() for line in loss_ax.get_lines()} == {"o"}
    figure.canvas.draw()
    assert all(float(tick).is_integer() for tick in loss_ax.get_xticks())


def test_right_panel_is_the_last_layer_averaged_over_heads(run_dir):
    figure = training_curves(run_dir)
    (attention_ax,) = axes_with_xlabel(figure, "key position")
    (image,) = attention_ax.get_images()
    expected = load_attention(run_dir).weights[-1].mean(axis=0)
    np.testing.assert_allclose(image.get_array(), expected, rtol=1e-6)
    assert "layer 1" in attention_ax.get_title()
    assert "mean of 4 heads" in attention_ax.get_title()


def test_the_attention_panel_of_a_one_head_model_says_no_mean_of_1_heads(make_run):
    figure = training_curves(make_run(n_layer=1, n_head=1))
    (attention_ax,) = axes_with_xlabel(figure, "key position")
    assert attention_ax.get_title() == "layer 0 attention (held-out example)"


def test_tokens_label_the_attention_panel(run_dir, tokens):
    (attention_ax,) = axes_with_xlabel(training_curves(run_dir), "key position")
    expected = [display_token(token) for token in tokens]
    assert [label.get_text() for label in attention_ax.get_xticklabels()] == expected
    assert [label.get_text() for label in attention_ax.get_yticklabels()] == expected


def test_without_attention_file_there_is_a_single_panel(make_run, assert_real_picture):
    figure = training_curves(make_run(attention=False))
    assert axes_with_xlabel(figure, "key position") == []
    assert len(figure.axes) == 2  # the loss axis and its twin
    assert_real_picture(figure)


def test_config_without_primary_metric_shows_the_loss_alone(make_run):
    figure = training_curves(make_run(config={"task": "addition"}, attention=False))
    (loss_ax,) = figure.axes
    assert "no primary_metric" in loss_ax.get_title()


def test_a_run_before_its_first_evaluation_shows_the_loss_alone(make_run):
    """The default metric is not logged until the first evaluation; a live run's picture was refused till then."""
    records = [{"step": step, "loss": 2.0 / step, "lr": 1e-3} for step in (1, 2, 3)]
    figure = training_curves(make_run(records=records, attention=False))
    (loss_ax,) = figure.axes
    assert loss_ax.get_title() == "training loss (heldout_exact_match is not logged yet)"
    with pytest.raises(VizError, match="metric 'heldout_exact_match' not found"):  # asked for, it is still an error
        training_curves(make_run("named", records=records), metric="heldout_exact_match")


def test_title_names_task_and_run(make_run):
    figure = training_curves(make_run("seed-3"))
    assert figure.get_suptitle() == "addition — seed-3"


def test_metric_the_run_lacks_is_named_with_what_it_has(run_dir):
    with pytest.raises(VizError, match=r"metric 'heldout_bits_per_char' not found in .*; it has: heldout_accuracy"):
        training_curves(run_dir, metric="heldout_bits_per_char")


def test_log_axis_is_labelled_with_plain_numbers(run_dir):
    figure = training_curves(run_dir)
    figure.canvas.draw()
    (loss_ax,) = axes_with_xlabel(figure, "step")
    labels = {label.get_text() for label in loss_ax.get_yticklabels()}
    assert {"0.1", "1"} <= labels


def test_the_attention_panel_marks_the_prompt_and_says_how_to_read_it(make_run, attention_examples):
    run = make_run(attention=False)
    save_attention_examples(run, [attention_examples[0]._replace(prompt_length=3)])
    (attention_ax,) = axes_with_xlabel(training_curves(run), "key position")
    assert sorted(line.get_xdata()[0] for line in attention_ax.get_lines()) == [0.0, 2.5]  # the x of hline, vline
    (caption,) = [text.get_text() for text in attention_ax.texts]
    assert caption.splitlines() == [READING, BOUNDARY]
