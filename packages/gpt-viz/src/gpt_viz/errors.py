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


def file_target(target: str | os.PathLike, what: str) -> Path:
    """`target` as a file path to write `what` to, or a one-line VizError: a directory, a name ending in a separator
    (``new/`` means a directory even before it exists), or a file or dead link above it."""
    if str(target) == "":  # Path("") is the current directory
        raise VizError(f"cannot write {what}: the path is empty; name a file")
    path = Path(target)
    if not path.name or path.is_dir() or str(target).endswith(("/", os.sep)):
        raise VizError(f"cannot write {what} to {target}: it is a directory; name a file")
    blocked = in_the_way(path.parent)
    if blocked is not None:
        raise VizError(f"cannot write {what} to {target}: {blocked}")
    return path
