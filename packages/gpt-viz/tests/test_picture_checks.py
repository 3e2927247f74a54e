"""The picture tests' colour count: a flat image is one colour, and pixels differing in any one channel are two."""

from __future__ import annotations

import numpy as np
from picture_checks import count_colours


def test_a_flat_image_is_one_colour_and_a_change_in_any_channel_is_another():
    for channels in (3, 4):
        flat = np.full((5, 7, channels), 128 / 255, dtype=np.float32)
        assert count_colours(flat) == 1
        for channel in range(channels):
            changed = flat.copy()
            changed[2, 3, channel] = 129 / 255
            assert count_colours(changed) == 2


def test_it_counts_what_unique_rows_count_on_random_bytes():
    pixels = np.random.default_rng(0).integers(0, 6, (40, 50, 4)).astype(np.float32) / 255
    assert count_colours(pixels) == len(np.unique(pixels.reshape(-1, 4), axis=0))
