"""Pictures of `gpt-train inspect` records, the inspect file names, and task probes under the metric curve."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fixture_records import HEADS_ABLATION

from gpt_viz import RunLayout, VizError, parse_metric_key, probe_key, training_curves
from gpt_viz.inspect_pictures import (
    head_ablation_heatmap,
    head_reads_picture,
    load_inspection,
    logit_lens_picture,
    most_needed_head,
    patching_picture,
)

HEADS = HEADS_ABLATION | {"examples": 5000, "baseline": 1.0, "zero": [[0.78, 0.83, 0.68, 0.25], [1.0, 1.0, 1.0, 1.0]]}
HEADS["mean"] = [[0.74, 0.83, 0.69, 0.42], [1.0, 1.0, 1.0, 1.0]]
LENS = {
    "examples": 1000,
    "depths": ["embeddings", "after layer 0", "after layer 1"],
    "answer_positions": ["position_0", "position_1", "position_2"],
    "exact_match": [0.0, 0.01, 1.0],
    "loss": [6.8, 1.7, 0.0001],
    "accuracy": [[0.2, 0.3, 0.25], [0.4, 0.3, 0.85], [1.0, 1.0, 1.0]],
    "position_loss": [[7.0, 6.5, 6.9], [1.5, 2.0, 0.4], [0.0001, 0.0001, 0.0001]],
    "split": "heldout",
}
PATCH = {
    "point": "resid_pre",
    "examples": 1000,
    "corrupted_position": 0,
    "answer_position": 1,
    "positions": ["prompt 0", "prompt 1", "prompt 2", "answer 0"],
    "clean_difference": 11.7,
    "corrupted_difference": -10.7,
    "restored": [[1.0, 0.0, 0.0, 0.0], [0.005, -0.0001, 0.0, 0.999]],
    "example": {"clean": "3122123", "corrupted": "0122012"},
    "split": "heldout",
}


def heatmaps(figure):
    return [ax for ax in figure.axes if ax.get_images()]


def the_heatmap(figure, values):
    """The figure's one heatmap, checked to draw `values`."""
    (ax,) = heatmaps(figure)
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), values)
    return ax


def texts(artists) -> list[str]:
    return [artist.get_text() for artist in artists]


def test_head_ablation_heatmap_shows_both_ablations_layer_by_head_on_one_scale(assert_real_picture):
    figure = head_ablation_heatmap(HEADS)
    zero_ax, mean_ax = heatmaps(figure)
    assert (zero_ax.get_title(), mean_ax.get_title()) == ("zero-ablated", "mean-ablated")
    np.testing.assert_array_equal(zero_ax.get_images()[0].get_array(), HEADS["zero"])
    np.testing.assert_array_equal(mean_ax.get_images()[0].get_array(), HEADS["mean"])
    assert zero_ax.get_images()[0].get_clim() == mean_ax.get_images()[0].get_clim() == (0.0, 1.0)
    assert [t.get_text() for t in zero_ax.get_yticklabels()] == ["layer 0", "layer 1"]
    assert "0.250" in [t.get_text() for t in zero_ax.texts]  # every cell says its value
    assert "baseline 1.0000" in figure.get_suptitle() and "5,000 held-out" in figure.get_suptitle()
    nearly = head_ablation_heatmap(HEADS | {"baseline": 0.999992, "examples": 250050})
    assert "(baseline 0.999992) on 250,050" in nearly.get_suptitle()  # as many digits as the count needs
    assert_real_picture(figure)


def test_logit_lens_picture_draws_metric_and_loss_by_depth_and_accuracy_by_position(assert_real_picture):
    figure = logit_lens_picture(LENS)
    assert texts(the_heatmap(figure, LENS["accuracy"]).get_yticklabels()) == LENS["depths"]
    curves = [ax for ax in figure.axes if ax.get_ylabel() == "exact match"][0]
    assert curves.get_lines()[0].get_ydata().tolist() == LENS["exact_match"]
    assert_real_picture(figure)


def test_patching_picture_is_layer_by_position_and_never_shows_minus_zero(assert_real_picture):
    figure = patching_picture(PATCH)
    ax = the_heatmap(figure, PATCH["restored"])
    assert texts(ax.get_xticklabels()) == PATCH["positions"]
    cells = texts(ax.texts)
    assert "-0.00" not in cells and cells == ["1.00", "0.00", "0.00", "0.00", "0.01", "0.00", "0.00", "1.00"]
    assert "3122123" in figure.get_suptitle()
    assert_real_picture(figure)


@pytest.mark.parametrize(
    ("draw", "record", "message"),
    [
        (
            head_ablation_heatmap,
            {k: v for k, v in HEADS.items() if k != "mean"},
            "the record has no 'mean'",
        ),
        (
            head_ablation_heatmap,
            HEADS | {"zero": [[0.5, 0.2], [0.1]]},
            "'zero' must be rows of numbers",
        ),
        (
            head_ablation_heatmap,
            HEADS | {"mean": [[0.5, 0.2]]},
            "'zero' is (2, 4) layers x heads but 'mean'",
        ),
        (logit_lens_picture, LENS | {"accuracy": [[1.0]]}, "not depths x answer positions"),
        (
            patching_picture,
            PATCH | {"positions": ["a"]},
            "'restored' has 4 positions but 'positions' names 1",
        ),
        (patching_picture, PATCH | {"restored": [[float("nan")]]}, "non-empty grid of finite numbers"),
    ],
)
def test_a_record_missing_what_its_picture_needs_is_one_viz_error(draw, record, message):
    with pytest.raises(VizError, match=message.replace("(", r"\(").replace(")", r"\)")):
        draw(record)


def test_load_inspection_reads_a_record_and_names_a_bad_file(tmp_path):
    layout = RunLayout(tmp_path)
    with pytest.raises(VizError, match="does not exist; `gpt-train inspect` writes it"):
        load_inspection(layout.heads_ablation)
    layout.heads_ablation.write_text(json.dumps(HEADS))
    assert load_inspection(layout.heads_ablation) == HEADS
    layout.patching("z").write_text("[1, 2")
    with pytest.raises(VizError, match="is not valid JSON"):
        load_inspection(layout.patching("z"))


def test_inspect_files_have_fixed_names_or_one_per_patched_point_and_are_what_a_replaced_run_drops(tmp_path):
    layout = RunLayout(tmp_path)
    names = {
        "heads_ablation": "inspect_heads.json",
        "heads_picture": "inspect_heads.png",
        "logit_lens": "inspect_logit_lens.json",
        "logit_lens_picture": "inspect_logit_lens.png",
        "reads": "inspect_reads.json",
        "reads_picture": "inspect_reads.png",
        "phases": "inspect_phases.json",
        "phases_picture": "inspect_phases.png",
        "report": "report.html",
    }
    assert {prop: getattr(layout, prop).name for prop in names} == names
    assert set(RunLayout.INSPECTIONS) == set(names.values())
    assert layout.patching("attn_out").name == "inspect_patch_attn_out.json"
    assert layout.patching_picture("attn_out").name == "inspect_patch_attn_out.png"
    written = [layout.heads_ablation, layout.patching("z"), layout.patching("attn_out"), layout.patching_picture("z")]
    for path in written:
        path.write_text("{}")
    (tmp_path / "inspect_patch_notes.txt").write_text("not a record")
    assert layout.existing() == [
        layout.heads_ablation,
        layout.patching("attn_out"),
        layout.patching("z"),
        layout.patching_picture("z"),
    ]


def test_probe_keys_are_heldout_keys_marked_as_probes_and_not_position_details():
    key = probe_key("source_attention")
    assert key == "heldout_probe_source_attention"
    parsed = parse_metric_key(key)
    assert parsed.is_probe and not parsed.is_position_detail
    assert not parse_metric_key("heldout_exact_match").is_probe


def test_probes_are_drawn_under_the_metric_curve(make_run, assert_real_picture):
    records = [
        {"step": s, "loss": 1.0 / s, "heldout_exact_match": s / 400}
        | ({probe_key("source_attention"): s / 500, probe_key("carry"): 0.5} if s % 100 == 0 else {})
        for s in range(10, 401, 10)
    ]
    figure = training_curves(
        make_run(records=records, config={"task": "sort", "primary_metric": "heldout_exact_match"})
    )
    (probes_ax,) = [ax for ax in figure.axes if ax.get_ylabel() == "task probes"]
    assert probes_ax.get_xlabel() == "step"
    lines = {line.get_label(): line for line in probes_ax.get_lines()}
    assert sorted(lines) == ["heldout_probe_carry", "heldout_probe_source_attention"]
    assert lines["heldout_probe_source_attention"].get_xdata().tolist() == [100, 200, 300, 400]
    metric_ax = [ax for ax in figure.axes if ax.get_ylabel() == "heldout_exact_match"][0]
    assert probes_ax.get_position().y1 < metric_ax.get_position().y0  # under it
    assert_real_picture(figure)


def test_a_run_without_probes_has_no_probe_panel(run_dir):
    assert not [ax for ax in training_curves(run_dir).axes if ax.get_ylabel() == "task probes"]


def test_the_reads_picture_draws_a_heatmap_per_head_and_refuses_a_misshapen_record():
    values = ["0", "1", "2"]
    grid = [[1.0, 0.5, 0.1], [0.2, 1.5, 0.3], [0.0, 0.1, 2.0]]
    record = {
        "examples": 10,
        "values": values,
        "reads": [[grid, grid], [grid, grid]],
        "on_answer": [[0.1, 0.2], [0.3, 0.4]],
    }
    figure = head_reads_picture(record)
    assert len([ax for ax in figure.axes if ax.get_title().startswith("head ")]) == 4
    assert figure.axes[3].get_title() == "head 1.1 (on answer 0.40)"
    with pytest.raises(VizError, match="'reads' must be layers x heads x 3 x 3"):
        head_reads_picture(record | {"reads": [[grid[:2], grid]]})


def test_the_most_needed_head_is_the_costliest_to_remove_the_first_of_equals():
    record = {"zero": [[0.9, 0.2], [0.2, 0.95]]}
    assert most_needed_head(record) == (0, 1)
    assert most_needed_head(record | {"higher_is_better": False}) == (1, 1)


def test_the_curves_panel_leaves_per_head_probes_to_the_induction_picture():
    from gpt_viz.curves import probe_keys

    records = [{"step": 10, probe_key("icl_score"): -1.0, probe_key("induction_l1h0"): 0.5,
                probe_key("previous_token_l0h1"): 0.9}]  # fmt: skip
    assert probe_keys(records) == [probe_key("icl_score")]


@pytest.mark.parametrize("n_head", [1, 2])
def test_the_head_ablation_title_fits_the_figure_of_a_model_with_few_heads(n_head):
    """The 6.8-inch figure of one or two heads cut the title's ends off."""
    record = HEADS | {"zero": [[0.5] * n_head] * 2, "mean": [[0.5] * n_head] * 2, "examples": 250050, "step": 123456}
    figure = head_ablation_heatmap(record)
    figure.canvas.draw()
    (title,) = (text.get_window_extent() for text in figure.texts if text.get_text() == figure.get_suptitle())
    assert title.x0 >= 0 and title.x1 <= figure.bbox.x1 and title.y1 <= figure.bbox.y1
    assert "checkpoint of step 123,456" in " ".join(figure.get_suptitle().split())


def test_the_head_ablation_title_counts_one_example_in_the_singular():
    assert "on 1 held-out example," in head_ablation_heatmap(HEADS | {"examples": 1, "step": 5}).get_suptitle()
