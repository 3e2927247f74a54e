"""The one-line errors gpt-viz raises, and what stops a path from being written (gpt-train's export asks too)."""

from __future__ import annotations

import os
from pathlib import Path


class VizError(Exception):
    """Bad input to a picture, in one line that names the file, metric or shape at fault: the CLI shows it as-is."""


def in_the_way(folder: Path) -> str | None:
    """What stops `folder` from being a directory, or being made one: a file at it or above it, or a link to nothing
    (None if neither)."""
    for each in (folder, *folder.parents):
        if each.is_symlink() and not each.exists():
            return f"{each} is a link to {os.readlink(each)}, which does not exist"
        if each.exists():
            return None if each.is_dir() else f"{each} is a file, not a directory"
    return None
