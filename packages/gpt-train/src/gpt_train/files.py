"""Atomic writes: every file of a run is written to a temporary name beside it, then renamed over it; a crash
leaves the previous file whole and a temporary that the next process removes (`stale_temporaries`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpt_train.errors import TrainError


class WriteError(TrainError):
    """A run file that could not be written (a full disk); the previous one is kept. `reason`: the system's why."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason


def temporary_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


LIBRARY_TEMPORARY = re.compile(r"\.tmp[A-Za-z0-9]{6}")  # the temporary safetensors writes through


def stale_temporaries(*directories: Path) -> list[Path]:
    found = []
    for directory in directories:
        ours = directory.glob(".*.tmp-*")
        theirs = (path for path in directory.glob(".tmp*") if LIBRARY_TEMPORARY.fullmatch(path.name))
        found += sorted(path for path in {*ours, *theirs} if path.is_file())
    return found


def write_atomically(
    path: Path, write: Callable[[Path], None], what: str = "", failures: tuple[type[Exception], ...] = (OSError,)
) -> None:
    """Call `write(temporary)`, fsync, then rename it over `path`; one of `failures` becomes a WriteError."""
    tmp = temporary_path(path)
    try:
        tmp.touch()  # created as the umask allows: the mode the file keeps
        mode = tmp.stat().st_mode & 0o777
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # a library writing through a temporary file of its own leaves it 0600
        os.replace(tmp, path)
    except failures as error:
        reason = " ".join((getattr(error, "strerror", None) or str(error)).split())
        label = f"{what} {path}" if what else str(path)
        raise WriteError(f"cannot write {label} ({reason}); the previous version, if any, is kept", reason) from None
    finally:
        with contextlib.suppress(OSError):  # the write's own error, already raised, is the one to show
            tmp.unlink(missing_ok=True)


def write_bytes_atomically(path: Path, data: bytes) -> None:
    write_atomically(path, lambda tmp: tmp.write_bytes(data))


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    write_bytes_atomically(path, (json.dumps(data, indent=2) + "\n").encode())
