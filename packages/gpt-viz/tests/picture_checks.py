"""What the picture tests check a drawn image by."""

from __future__ import annotations

import numpy as np


def count_colours(pixels: np.ndarray) -> int:
    """How many distinct colours an image read by `imread` holds (floats in [0, 1], a byte a channel in the
    file): each pixel's channels packed into one integer and the integers counted, a sort of one number a pixel
    where `np.unique(axis=0)` sorts the pixels as records (seconds for a figure)."""
    codes = np.zeros(pixels.shape[:2], dtype=np.uint32)
    for channel in np.moveaxis((pixels * 255).round().astype(np.uint32), -1, 0):
        codes = codes << 8 | channel
    return len(np.unique(codes))
