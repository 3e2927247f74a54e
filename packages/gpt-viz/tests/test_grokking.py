"""Train and held-out accuracy on a log step axis, with the 0.99 crossings marked."""

import numpy as np
import pytest

from gpt_viz import VizError, collapses, first_crossing, grokking, load_metrics


def only_axes(figure):
    (ax,) = figure.axes
    return ax


def vertical_line_steps(ax):
    return sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--")


def legend_texts(ax):
    return [text.get_text() for text in ax.get_legend().get_texts()]


def test_grokking_renders_as_a_real_picture(run_dir, assert_real_picture):
    assert_real_picture(grokking(run_dir))


def test_first_crossing_of_each_accuracy_is_marked_with_a_vertical_line(run_dir):
    ax = only_axes(grokking(run_dir))
    assert vertical_line_steps(ax) == [200, 400]
    assert {text.get_text() for text in ax.texts} == {"step 200", "step 400"}


def test_legend_gives_the_crossing_steps(run_dir):
    assert legend_texts(only_axes(grokking(run_dir))) == [
        "train accuracy (≥ 0.99 at step 200)",
        "held-out accuracy (≥ 0.99 at step 400)",
    ]


def test_step_is_on_a_log_axis(run_dir):
    ax = only_axes(grokking(run_dir))
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "step (log scale)"
    assert ax.get_ylabel() == "accuracy"


def test_step_zero_is_left_out_of_the_log_axis(run_dir):
    ax = only_axes(grokking(run_dir))
    curves = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [min(curve.get_xdata()) for curve in curves] == [50, 50]


def test_accuracy_that_never_crosses_says_so_in_the_legend():
    records = [
        {"step": step, "loss": 1.0, "train_accuracy": train, "heldout_accuracy": heldout}
        for step, train, heldout in [(10, 0.5, 0.1), (100, 1.0, 0.3), (1000, 1.0, 0.6)]
    ]
    ax = only_axes(grokking(records))
    assert legend_texts(ax) == [
        "train accuracy (≥ 0.99 at step 100)",
        "held-out accuracy (never reaches 0.99)",
    ]
    assert vertical_line_steps(ax) == [100]


def test_already_loaded_records_give_the_same_picture(run_dir):
    from_records = only_axes(grokking(load_metrics(run_dir)))
    from_directory = only_axes(grokking(run_dir))
    assert legend_texts(from_records) == legend_texts(from_directory)


def test_first_crossing_is_the_first_step_at_or_above_the_threshold():
    steps = np.array([1, 2, 3, 4])
    assert first_crossing(steps, np.array([0.5, 0.99, 0.8, 1.0])) == 2
    assert first_crossing(steps, np.array([0.5, 0.6, 0.7, 0.98])) is None


def test_run_without_accuracies_names_the_missing_metric(make_run):
    run = make_run(records=[{"step": 1, "elapsed": 0.1, "loss": 2.0, "lr": 1e-3}])
    with pytest.raises(VizError, match="metric 'train_accuracy' not found in .*; it has: loss, lr"):
        grokking(run)


def exact_match_records():
    """A run whose task reports exact_match, not accuracy: train reaches 0.99 at step 100, held-out at 1000."""
    return [
        {"step": step, "loss": 1.0, "train_exact_match": train, "heldout_exact_match": heldout}
        for step, train, heldout in [(10, 0.2, 0.0), (100, 0.995, 0.1), (1000, 1.0, 0.99)]
    ]


def test_another_metric_plots_its_train_and_heldout_keys():
    ax = only_axes(grokking(exact_match_records(), metric="exact_match"))
    assert legend_texts(ax) == [
        "train exact match (≥ 0.99 at step 100)",
        "held-out exact match (≥ 0.99 at step 1000)",
    ]
    assert ax.get_ylabel() == "exact match"
    assert vertical_line_steps(ax) == [100, 1000]


def test_a_metric_the_run_lacks_names_the_key_it_looked_for():
    with pytest.raises(VizError, match="metric 'train_accuracy' not found in the records; it has: heldout_exact_match"):
        grokking(exact_match_records())


@pytest.mark.parametrize("metric", ["heldout_accuracy", "train_exact_match", ""])
def test_a_metric_given_as_a_key_or_empty_is_refused_with_the_name_to_use(metric):
    with pytest.raises(VizError, match="grokking needs a metric name without its split"):
        grokking(exact_match_records(), metric=metric)


def grokking_records():
    """Train accuracy at 1.0 from step 100, held-out from 2000; a progress measure rising before the jump."""
    records = []
    for step in (0, 10, 100, 500, 1000, 1500, 2000, 3000):
        fitted, jumped = step >= 100, step >= 2000
        records.append({
            "step": step, "loss": 0.01 if fitted else 4.0,
            "train_accuracy": 1.0 if fitted else 0.05, "heldout_accuracy": 1.0 if jumped else 0.01,
            "train_loss": 0.01 if fitted else 4.0, "heldout_loss": 0.02 if jumped else 20.0,
            "heldout_probe_fourier_top5_share": min(1.0, 0.1 + step / 2500),
        })  # fmt: skip
    return records


def test_progress_and_loss_panels_share_the_log_step_axis_under_the_accuracy():
    figure = grokking(grokking_records(), loss="loss", progress="heldout_probe_fourier_top5_share")
    accuracy, progress, loss = figure.axes
    assert [ax.get_ylabel() for ax in figure.axes] == ["accuracy", "fourier top5 share", "loss (log scale)"]
    assert all(ax.get_xscale() == "log" for ax in figure.axes) and loss.get_yscale() == "log"
    assert loss.get_xlabel() == "step (log scale)" and accuracy.get_xlabel() == ""
    assert accuracy.get_position().y0 > progress.get_position().y0 > loss.get_position().y0  # stacked in that order
    (curve,) = progress.get_lines()[:1]
    assert list(curve.get_xdata()) == [10, 100, 500, 1000, 1500, 2000, 3000]  # step 0 left out
    assert legend_texts(loss) == ["train loss", "held-out loss"]
    for ax in figure.axes:  # memorisation and the jump marked in every panel
        assert vertical_line_steps(ax) == [100, 2000]


def test_a_picture_with_every_panel_renders(assert_real_picture):
    assert_real_picture(grokking(grokking_records(), loss="loss", progress="heldout_probe_fourier_top5_share"))


def test_a_missing_progress_key_is_named():
    with pytest.raises(VizError, match="metric 'heldout_fourier_top9_share' not found in the records"):
        grokking(grokking_records(), progress="heldout_fourier_top9_share")


def test_a_loss_given_as_a_key_is_refused_like_the_metric():
    with pytest.raises(VizError, match="grokking needs a metric name without its split"):
        grokking(grokking_records(), loss="heldout_loss")


@pytest.mark.parametrize(
    ("values", "spans"),
    [
        ([0.1, 0.5, 0.8], []),  # never reached
        ([0.1, 0.995, 1.0, 1.0], []),  # reached and held
        ([0.1, 0.995, 0.5, 0.999, 0.999, 0.4, 0.3], [(30, 40), (60, None)]),  # back once, then ends below
        ([0.995, 0.2, 0.3, 0.991], [(20, 40)]),
        ([0.5, 0.99, 0.98999, 0.99], [(30, 40)]),  # the threshold itself counts as reached
    ],
)
def test_collapses_are_the_spans_below_the_threshold_after_first_reaching_it(values, spans):
    steps = np.arange(10, 10 * len(values) + 1, 10)
    assert collapses(steps, np.array(values)) == spans


def test_each_collapse_after_the_crossing_is_shaded_in_its_splits_colour_and_counted_in_the_legend():
    """A grokking run's slingshot: train accuracy falls back twice after fitting, held-out once after its jump."""
    rows = [(10, 0.2, 0.01), (20, 1.0, 0.01), (30, 0.6, 0.01), (40, 1.0, 0.5), (50, 1.0, 0.995),
            (60, 0.5, 0.7), (70, 1.0, 0.999), (80, 1.0, 1.0)]  # fmt: skip
    records = [{"step": s, "loss": 1.0, "train_accuracy": t, "heldout_accuracy": h} for s, t, h in rows]
    ax = only_axes(grokking(records))
    shaded = sorted((round(patch.get_x()), round(patch.get_x() + patch.get_width())) for patch in ax.patches)
    assert shaded == [(30, 40), (60, 70), (60, 70)]
    labels = legend_texts(ax)
    assert "train below 0.99 again, 2 times (the slingshot)" in labels
    assert "held-out below 0.99 again, once" in labels


SLINGSHOT = [(10, 0.2, 0.01), (20, 1.0, 0.01), (30, 0.6, 0.01), (40, 1.0, 0.5), (50, 1.0, 0.995), (60, 1.0, 1.0)]


def slingshot_records(train_losses: list[float]) -> list[dict]:
    """Train accuracy fits at step 20 and collapses at step 30; held-out generalises at step 50."""
    return [{"step": s, "train_accuracy": t, "heldout_accuracy": h, "train_loss": loss, "heldout_loss": 1.0}
            for (s, t, h), loss in zip(SLINGSHOT, train_losses, strict=True)]  # fmt: skip


def test_the_caption_points_at_the_delay_and_names_the_collapses_and_the_loss_spike_it_shows():
    records = slingshot_records([2.0, 0.1, 0.5, 0.05, 0.04, 0.03])  # 5x the loss before the collapse
    assert " ".join(grokking(records, loss="loss").get_supxlabel().split()) == (
        "Look at the gap between the dashed lines: train accuracy reaches 0.99 at step 20, held-out only at step 50 "
        "(2.5x later). Shaded: after the fit, train accuracy dips and recovers, the training loss rising up to 5x "
        "(bottom): the slingshot (Thilak et al. 2022)."
    )


@pytest.mark.parametrize("train_losses", [[1.0] * 6, [2.0, 0.1, 0.15, 0.05, 0.04, 0.03]])
def test_a_collapse_without_a_loss_spike_is_captioned_without_one(train_losses):
    """A flat training loss, or one rising 1.5x, was captioned "with a training-loss spike"."""
    caption = " ".join(grokking(slingshot_records(train_losses), loss="loss").get_supxlabel().split())
    assert "Shaded: after the fit, train accuracy dips and recovers: the slingshot" in caption
    assert "loss" not in caption


def test_a_collapse_the_run_ends_in_is_not_said_to_recover():
    rows = [(10, 0.2, 0.01), (20, 1.0, 0.01), (30, 0.6, 0.01)]
    records = [{"step": s, "train_accuracy": t, "heldout_accuracy": h} for s, t, h in rows]
    caption = " ".join(grokking(records).get_supxlabel().split())
    assert "train accuracy dips and is below 0.99 at the last step: the slingshot" in caption


def test_a_run_that_never_generalises_has_no_gap_to_point_at(run_dir):
    records = [r | {"heldout_accuracy": 0.01} for r in load_metrics(run_dir) if "heldout_accuracy" in r]
    assert grokking(records).get_supxlabel() == ""
