"""Which steps the learner's folder passes: DIR/.learn.json holds a hash of the bytes each pass graded and of the
folder's modules they import, so an edit to any of them unchecks it. Each change is made under a lock on the
folder (flock, on POSIX) and written atomically: two checks ending at once lose no pass."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from gpt_train.files import write_json_atomically
from gpt_train.learn.steps import BY_NAME, Step

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None

RECORD = ".learn.json"


def _imported_files(folder: Path, source: bytes) -> dict[str, bytes]:
    """The bytes of each module file in `folder` that `source` imports (`from block import Block`, a helpers.py of
    the learner's), and of those they import, by module name (a step file that cannot be read: a marker no file
    holds)."""
    found: dict[str, bytes] = {}
    waiting = [source]
    while waiting:
        try:
            tree = ast.parse(waiting.pop())
        except (SyntaxError, ValueError):  # the check says what is wrong with such a file
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in {name.partition(".")[0] for name in names} - found.keys():
                path = folder / f"{name}.py"  # a step's file, or a module of the learner's own
                if name not in BY_NAME and not path.is_file():  # a library's
                    continue
                try:
                    found[name] = path.read_bytes()
                    waiting.append(found[name])
                except OSError:
                    found[name] = b"\0missing"
    return found


def imported_modules(folder: Path, source: bytes) -> set[str]:
    """The names of the folder's modules `source` imports, directly or through each other."""
    return set(_imported_files(folder, source))


def digest(folder: Path, source: bytes) -> str:
    """What a pass is recorded for: the bytes graded and those of the folder's modules they import, so an edit to
    any of them after it is not passed."""
    h = hashlib.sha256(source)
    for name, imported in sorted(_imported_files(folder, source).items()):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(imported).digest())
    return h.hexdigest()


def _record(folder: Path) -> dict[str, str]:
    """Each passed step's digest; a record missing, unreadable or of another shape is none."""
    try:
        passed = json.loads((folder / RECORD).read_text(encoding="utf-8"))["passed"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(passed, dict):
        return {}
    return {name: value for name, value in passed.items() if isinstance(value, str)}


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on the folder itself (no lock file left behind)."""
    if fcntl is None:
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def record_pass(folder: Path, step: Step, graded: str | None = None) -> bool:
    """Record that `step` passes, if the digest of its file and the folder's modules it imports is still `graded`,
    the one taken before the grading (None: the files now); False, and nothing recorded, where one changed during
    the grading, which may have read either version."""
    try:
        now = digest(folder, (folder / step.file_name).read_bytes())
    except OSError:  # deleted or made unreadable during the grading: changed too
        return False
    if graded is not None and now != graded:
        return False
    with _locked(folder):
        passed = _record(folder) | {step.name: now}
        write_json_atomically(folder / RECORD, {"passed": passed})
    return True


def forget_pass(folder: Path, step: Step) -> None:
    with _locked(folder):
        passed = _record(folder)
        if passed.pop(step.name, None) is not None:
            write_json_atomically(folder / RECORD, {"passed": passed})


def status(folder: Path, step: Step) -> str:
    """'passed', 'not passed' (a file that is not, or not since its last edit), or 'not started'."""
    path = folder / step.file_name
    if not path.is_file():
        return "not started"
    try:
        source = path.read_bytes()
    except OSError:
        return "not passed"
    return "passed" if _record(folder).get(step.name) == digest(folder, source) else "not passed"
