"""Atomic writes: every file of a run is written to a temporary name beside it, then renamed over it; a crash
leaves the previous file whole and a temporary that the next process removes (`stale_temporaries`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpt_train.errors import TrainError
from gpt_viz.files import TEMPORARY_GLOB
from gpt_viz.files import write_atomically as replace_atomically


class WriteError(TrainError):
    """A run file that could not be written (a full disk); the previous one is kept. `reason`: the system's why."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


LIBRARY_TEMPORARY = re.compile(r"\.tmp[A-Za-z0-9]{6}")  # the temporary safetensors writes through


def stale_temporaries(*directories: Path) -> list[Path]:
    found = []
    for directory in directories:
        ours = directory.glob(TEMPORARY_GLOB)
        theirs = (path for path in directory.glob(".tmp*") if LIBRARY_TEMPORARY.fullmatch(path.name))
        found += sorted(path for path in {*ours, *theirs} if path.is_file())
    return found


def write_atomically(
    path: Path, write: Callable[[Path], None], what: str = "", failures: tuple[type[Exception], ...] = (OSError,)
) -> None:
    """gpt_viz's write_atomically, one of `failures` becoming a WriteError."""
    try:
        replace_atomically(path, write)
    except failures as error:
        reason = " ".join((getattr(error, "strerror", None) or str(error)).split())
        label = f"{what} {path}" if what else str(path)
        raise WriteError(f"cannot write {label} ({reason}); the previous version, if any, is kept", reason) from None


def write_bytes_atomically(path: Path, data: bytes) -> None:
    write_atomically(path, lambda tmp: tmp.write_bytes(data))


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    write_bytes_atomically(path, (json.dumps(data, indent=2) + "\n").encode())


def is_utf8(path: str | Path) -> bool:
    """Whether a path's bytes are UTF-8 (Python holds other bytes as lone surrogates, which safetensors refuses)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
