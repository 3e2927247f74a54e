"""Files written whole: to a temporary name beside the target, then renamed over it, so that a full disk or a
crash leaves the previous file (or none), never part of the new one. Every file of a run is written this way,
gpt-train's included."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path


def temporary_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


TEMPORARY_GLOB = ".*.tmp-*"  # every temporary_path: what a killed process leaves, for the next to remove


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(temporary)`, fsync, then rename it over `path`; whatever fails is raised, and the temporary is
    removed."""
    tmp = temporary_path(path)
    try:
        tmp.touch()  # created as the umask allows: the mode the file keeps
        mode = tmp.stat().st_mode & 0o777
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # a library writing through a temporary file of its own leaves it 0600
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # the write's own error, already raised, is the one to show
            tmp.unlink(missing_ok=True)
