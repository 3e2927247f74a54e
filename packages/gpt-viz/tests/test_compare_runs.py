"""Several runs overlaid on one axis, one legend entry per run."""

import pytest

from gpt_viz import VizError, compare_runs


@pytest.fixture
def ablation(make_run):
    names = ["baseline", "no-layernorm", "no-residual", "neither"]
    return [make_run(name, attention=False) for name in names]


def legend_texts(figure):
    (ax,) = figure.axes
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_compare_renders_as_a_real_picture(ablation, assert_real_picture):
    assert_real_picture(compare_runs(ablation, "heldout_exact_match"))


def test_every_run_gets_a_legend_entry_named_after_its_directory(ablation):
    figure = compare_runs(ablation, "heldout_exact_match")
    assert legend_texts(figure) == ["baseline", "no-layernorm", "no-residual", "neither"]
    (ax,) = figure.axes
    assert len(ax.get_lines()) == 4


def test_labels_replace_the_directory_names(ablation):
    labels = ["baseline", "no LayerNorm", "no residual", "neither"]
    assert legend_texts(compare_runs(ablation, "loss", labels=labels)) == labels


def test_training_loss_is_on_a_log_axis_by_default(ablation):
    (ax,) = compare_runs(ablation, "loss").axes
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "training loss"
    assert ax.get_xlabel() == "step"


def test_held_out_loss_is_on_a_log_axis_by_default(ablation):
    (ax,) = compare_runs(ablation, "heldout_loss").axes
    assert ax.get_yscale() == "log"


def test_accuracy_is_on_a_linear_axis_by_default(ablation):
    (ax,) = compare_runs(ablation, "heldout_exact_match").axes
    assert ax.get_yscale() == "linear"
    assert ax.get_ylabel() == "heldout_exact_match"


def test_log_y_overrides_the_default(ablation):
    (ax,) = compare_runs(ablation, "loss", log_y=False).axes
    assert ax.get_yscale() == "linear"


def test_label_count_must_match_run_count(ablation):
    with pytest.raises(VizError, match="got 2 labels for 4 runs"):
        compare_runs(ablation, "loss", labels=["a", "b"])


def test_no_runs_is_an_error():
    with pytest.raises(VizError, match="at least one run directory"):
        compare_runs([], "loss")


def test_run_missing_the_metric_is_named(make_run, ablation):
    old = make_run("old", records=[{"step": 0, "elapsed": 0.0, "loss": 2.0, "lr": 1e-3}])
    with pytest.raises(VizError, match=r"metric 'heldout_exact_match' not found in .*old; it has: loss, lr$"):
        compare_runs([*ablation, old], "heldout_exact_match")


def test_evaluation_points_are_dotted_and_per_step_loss_is_not(ablation):
    (eval_ax,) = compare_runs(ablation, "heldout_exact_match").axes
    (loss_ax,) = compare_runs(ablation, "loss").axes
    assert {line.get_marker() for line in eval_ax.get_lines()} == {"o"}
    assert {line.get_marker() for line in loss_ax.get_lines()} == {"None"}


def test_a_label_or_run_name_starting_with_an_underscore_still_gets_its_legend_entry(make_run, recwarn):
    """matplotlib hides a label starting with "_": `--label _x` drew no legend and warned."""
    runs = [make_run("_base", attention=False), make_run("other", attention=False)]
    assert legend_texts(compare_runs(runs, "loss")) == ["_base", "other"]
    assert legend_texts(compare_runs(runs, "loss", labels=["_x", "_y"])) == ["_x", "_y"]
    assert [str(warning.message) for warning in recwarn] == []
