"""The run directory schema: file names in one place, and metric keys that read back as they were made."""

import os
from pathlib import Path

import pytest

from gpt_viz import AXIS_KEYS, EXAMPLES, HELDOUT, SPLITS, TRAIN
from gpt_viz.run_layout import MetricKey, RunLayout, metric_key, parse_metric_key


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("name", ["accuracy", "exact_match", "loss", EXAMPLES, "position_3_accuracy"])
def test_every_split_and_name_round_trip_through_a_key(split, name):
    key = metric_key(split, name)
    assert key == f"{split}_{name}"
    assert parse_metric_key(key) == MetricKey(split, name)


def test_the_two_splits_are_train_and_heldout():
    assert SPLITS == (TRAIN, HELDOUT) == ("train", "heldout")


@pytest.mark.parametrize("key", ["loss", "lr", "step", "elapsed", "train", "heldout_", "valid_loss", ""])
def test_keys_without_a_known_split_parse_to_none(key):
    assert parse_metric_key(key) is None


def test_axis_keys_are_the_bookkeeping_on_every_line():
    assert sorted(AXIS_KEYS) == ["elapsed", "step"]


@pytest.mark.parametrize("key", ["heldout_position_3_accuracy", "train_digit_0_accuracy", "heldout_position_12_loss"])
def test_per_position_keys_are_recognised_as_details(key):
    assert parse_metric_key(key).is_position_detail


@pytest.mark.parametrize(
    "key", ["heldout_exact_match", "heldout_digit_accuracy", "heldout_bits_per_char", "train_accuracy"]
)
def test_summary_keys_are_not_position_details(key):
    assert not parse_metric_key(key).is_position_detail


@pytest.mark.parametrize("split", ["valid", "test", "Train", ""])
def test_a_key_for_an_unknown_split_is_refused(split):
    with pytest.raises(ValueError, match="split must be one of train, heldout"):
        metric_key(split, "accuracy")


def test_a_key_without_a_name_is_refused():
    with pytest.raises(ValueError, match="metric name"):
        metric_key(HELDOUT, "")


# The schema as runs on disk already have it: each path property and the file name it must give.
# Renaming a file breaks every run written before, so this table is written out by hand, not derived; it is
# a text table so that a grep for a quoted file name still finds its one definition, in run_layout.
SCHEMA = dict(
    line.split()
    for line in """
    config              config.json
    metrics             metrics.jsonl
    final               final.json
    checkpoint          checkpoint.safetensors
    attention           attention.npz
    curves_picture      curves.png
    attention_picture   attention.png
    grokking_picture    grokking.png
    """.strip().splitlines()
)


@pytest.mark.parametrize(("prop", "name"), SCHEMA.items())
def test_each_layout_path_is_its_file_name_under_the_root(tmp_path, prop, name):
    layout = RunLayout(str(tmp_path))
    assert getattr(layout, prop) == tmp_path / name
    assert getattr(RunLayout, prop.upper()) == name


def test_the_root_is_a_path(tmp_path):
    assert RunLayout(str(tmp_path)).root == tmp_path


def test_files_lists_every_run_file_once():
    assert tuple(SCHEMA.values()) == RunLayout.FILES


def test_existing_lists_the_run_files_present_in_files_order(tmp_path):
    layout = RunLayout(tmp_path)
    assert layout.existing() == []
    for path in (layout.attention, layout.metrics, tmp_path / "notes.txt"):
        path.write_text("x")
    assert layout.existing() == [layout.metrics, layout.attention]


def test_a_tasks_files_are_named_by_their_parameter_and_listed_after_the_run_files(tmp_path):
    layout = RunLayout(tmp_path)
    assert layout.task_file("tokenizer_file") == tmp_path / "task.tokenizer_file"
    assert RunLayout.task_file_name("tokenizer_file") == "task.tokenizer_file"
    for path in (layout.task_file("vocab"), layout.config, layout.task_file("merges"), tmp_path / "taskless.txt"):
        path.write_text("x")
    assert layout.existing() == [layout.config, layout.task_file("merges"), layout.task_file("vocab")]


def test_existing_lists_the_views_gpt_viz_writes_into_a_run_after_the_inspections(tmp_path):
    layout = RunLayout(tmp_path)
    views = ["attention-layer1.png", "attention-layer0.svg", "curves.svg", "grokking.svg"]
    for name in (*views, "explore.html", "report.html", "attention-notes.png", "curves.pdf"):
        (tmp_path / name).write_text("x")
    expected = ["report.html", "explore.html", "attention-layer1.png", "attention-layer0.svg", "curves.svg"]
    assert [path.name for path in layout.existing()] == [*expected, "grokking.svg"]


def test_existing_of_a_missing_directory_is_empty(tmp_path):
    assert RunLayout(tmp_path / "nowhere").existing() == []


def test_layouts_of_one_directory_are_equal_and_hashable(tmp_path):
    assert RunLayout(tmp_path) == RunLayout(Path(str(tmp_path)))
    assert len({RunLayout(tmp_path), RunLayout(tmp_path)}) == 1


def test_a_runs_name_is_its_directorys_own_name_for_dot_too(tmp_path, monkeypatch):
    run = tmp_path / "sort-rope"
    run.mkdir()
    monkeypatch.chdir(run)
    assert RunLayout(".").name == RunLayout(run).name == "sort-rope"


def test_a_run_name_that_is_not_utf8_is_shown_with_replacement_characters(tmp_path):
    name = os.fsdecode(b"sort\xe9")  # a Latin-1 name: Python holds the byte as a lone surrogate
    assert RunLayout(tmp_path / name).name == "sort\ufffd"
    assert RunLayout(tmp_path / name).name.encode("utf-8")  # a page or a title can write it
