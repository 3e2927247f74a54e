"""Which steps the learner's folder passes: each pass is recorded with a hash of the file that passed, so
editing a file after its check makes it unchecked again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gpt_train.files import write_json_atomically
from gpt_train.learn.steps import Step

RECORD = ".learn.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record(folder: Path) -> dict[str, str]:
    try:
        return json.loads((folder / RECORD).read_text())["passed"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def record_pass(folder: Path, step: Step) -> None:
    passed = _record(folder) | {step.name: _digest(folder / step.file_name)}
    write_json_atomically(folder / RECORD, {"passed": passed})


def forget_pass(folder: Path, step: Step) -> None:
    passed = _record(folder)
    if passed.pop(step.name, None) is not None:
        write_json_atomically(folder / RECORD, {"passed": passed})


def status(folder: Path, step: Step) -> str:
    """'passed', 'not passed' (a file that is not, or not since its last edit), or 'not started'."""
    path = folder / step.file_name
    if not path.is_file():
        return "not started"
    return "passed" if _record(folder).get(step.name) == _digest(path) else "not passed"
