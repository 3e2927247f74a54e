"""What a run leaves in its directory as it trains: metrics.jsonl, checkpoints and final.json."""

from __future__ import annotations

import json
import os
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpt_train.checkpoint import TrainingState, load_checkpoint, save_checkpoint, save_snapshot
from gpt_train.files import WriteError, write_bytes_atomically, write_json_atomically
from gpt_train.runs import Run, RunDirError, RunWarning, describe
from gpt_viz import RunLayout


class Record:
    """What a run leaves in its directory as it goes; a no-op on every rank but 0, which alone writes."""

    def __init__(self, run: Run):
        self.layout = run.layout
        self.task_name = run.config.task
        self.active = run.rank.is_main
        self.lock = run.lock
        self.snapshots_kept = True  # until one cannot be written

    def check_in_place(self) -> None:
        """The locked directory still has the run's path: one moved away stops the run, rather than write by name
        into whatever is there now (another run's directory) or fail with no word of where the run went."""
        fd = None if self.lock is None else self.lock.fd
        if fd is None:
            return
        try:
            here = os.stat(self.layout.root)
        except OSError:
            here = None
        locked = os.fstat(fd)
        if here is not None and (here.st_dev, here.st_ino) == (locked.st_dev, locked.st_ino):
            return
        try:
            now = os.readlink(f"/proc/self/fd/{fd}")  # Linux names where the directory is now
        except OSError:
            now = " (deleted)"
        if now.endswith(" (deleted)"):
            raise RunDirError(f"{self.layout.root} was removed (or moved) while the run trained; it stopped")
        raise RunDirError(
            f"{self.layout.root} was moved to {shlex.quote(now)} while the run trained; it stopped, writing nothing "
            "more: --resume with that path continues it"
        )

    def restore(self) -> TrainingState:
        return load_checkpoint(self.layout.checkpoint, self.task_name)

    def start_at(self, step: int, final_only: bool = False) -> None:
        """Drop what was written past `step`, where the run resumes; with `final_only` (only the final evaluation
        left) its row too, which that evaluation writes again."""
        if self.active:
            _keep_metrics_through(self.layout.metrics, step - 1 if final_only else step)
            for later in [path for at, path in self.layout.snapshots().items() if at > step]:
                later.unlink()

    def log(self, record: dict[str, Any]) -> None:
        if self.active:
            self.check_in_place()
            _write(self.layout.metrics, json.dumps(record) + "\n", mode="a")

    def checkpoint(self, state: Callable[[], TrainingState]) -> None:
        if self.active:
            self.check_in_place()
            save_checkpoint(self.layout.checkpoint, state())

    def snapshot(self, step: int, weights: dict[str, torch.Tensor]) -> None:
        """The weights at `step`; one that cannot be written is a warning, and the run goes on without more."""
        if not (self.active and self.snapshots_kept):
            return
        self.check_in_place()
        path = self.layout.snapshot(step)
        try:
            save_snapshot(path, self.task_name, step, weights)
        except WriteError as error:
            self.snapshots_kept = False
            warnings.warn(
                f"cannot write snapshot {path} ({error.reason or error}); the run goes on without snapshots, keeping "
                "those written",
                RunWarning,
                stacklevel=2,
            )

    def finish(self, final: dict[str, Any]) -> None:
        if self.active:
            self.check_in_place()
            write_json_atomically(self.layout.final, final)

    def last_checkpoint(self) -> str:
        checkpoint = self.layout.checkpoint
        return f"the last good checkpoint is {checkpoint}" if checkpoint.exists() else "no checkpoint was written yet"


def finished_at(layout: RunLayout, step: int) -> bool:
    """Whether final.json is that of a run finished at `step` (an unreadable one is not)."""
    return not_finished(layout, step) is None


def not_finished(layout: RunLayout, step: int) -> str | None:
    """None for a run whose final.json is that of step `step`; else why not, in words: no final.json, one of another
    step (a longer run resumed), or one that is damaged, which may be a finished run's."""
    try:
        final = json.loads(layout.final.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "unfinished"
    except (OSError, ValueError):
        final = None
    written = final.get("step") if isinstance(final, dict) else None
    if written == step:
        return None
    if isinstance(written, int):
        return f"unfinished (its {RunLayout.FINAL} is of step {written:,})"
    return f"unfinished, or its {RunLayout.FINAL} is damaged"


def _keep_metrics_through(path: Path, step: int) -> None:
    """Drop metrics.jsonl's lines past `step`, where a run resumes; an incomplete last line, with a warning."""
    if not path.exists():
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunDirError(f"cannot read {path}: {error}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    kept = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                raise RunDirError(f"{path} line {number} is not valid JSON; the file is damaged") from None
            warnings.warn(f"dropped the incomplete last line of {path}", RunWarning, stacklevel=2)
            continue
        logged = record.get("step", 0) if isinstance(record, dict) else None
        if isinstance(logged, bool) or not isinstance(logged, int):
            raise RunDirError(
                f"{path} line {number} is not a metrics record (a JSON object whose step is a whole number); "
                "the file is damaged"
            )
        if logged <= step:
            kept.append(line)
    rest = "".join(line + "\n" for line in kept)
    if rest != text:  # rewritten whole, never truncated in place: a reader or a crash sees the old file or the new
        write_bytes_atomically(path, rest.encode("utf-8"))


def _write(path: Path, text: str, mode: str) -> None:
    try:
        with open(path, mode, encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise RunDirError(f"cannot write {path} ({describe(error)})") from None
