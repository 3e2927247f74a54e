"""Saving: one file per format, sized figsize × SAVE_DPI, parents created, each written whole."""

import errno
import os

import pytest
from matplotlib.image import imread

from gpt_viz import SAVE_DPI, VizError, attention_map, save_figure


@pytest.fixture
def figure(layer_weights, tokens):
    return attention_map(layer_weights[0], tokens)


def test_png_is_written_at_save_dpi_into_new_parent_directories(figure, tmp_path):
    (png,) = save_figure(figure, tmp_path / "a" / "b" / "map.png")
    assert png == tmp_path / "a" / "b" / "map.png"
    width, height = figure.get_size_inches() * SAVE_DPI
    assert imread(png).shape[:2] == (round(height), round(width))


def test_each_requested_format_is_written_next_to_the_others(figure, tmp_path):
    written = save_figure(figure, tmp_path / "map", formats=("png", "svg"))
    assert written == [tmp_path / "map.png", tmp_path / "map.svg"]
    assert (tmp_path / "map.svg").read_text().lstrip().startswith("<?xml")


def test_dots_in_a_name_are_kept(figure, tmp_path):
    (png,) = save_figure(figure, tmp_path / "lr3e-4.seed0-curves")
    assert png.name == "lr3e-4.seed0-curves.png"


def test_unsupported_format_is_an_error(figure, tmp_path):
    with pytest.raises(VizError, match="cannot save as 'docx'; supported formats: .*png"):
        save_figure(figure, tmp_path / "map", formats=("docx",))


def test_unwritable_location_is_an_error(figure, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(VizError, match="cannot write .*map.png"):
        save_figure(figure, tmp_path / "file" / "map.png")


def test_a_full_disk_keeps_the_picture_already_there_and_leaves_no_part_of_the_new_one(figure, tmp_path, monkeypatch):
    (png,) = save_figure(figure, tmp_path / "map.png")
    before = png.read_bytes()

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("gpt_viz.files.os.fsync", no_space)
    with pytest.raises(VizError, match="cannot write .*map.png: No space left on device"):
        save_figure(figure, tmp_path / "map.png")
    assert png.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["map.png"]
