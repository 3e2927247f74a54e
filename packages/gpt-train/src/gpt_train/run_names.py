"""A RUN on gpt-train's command line (gpt_viz.run_names), its failures in Python gpt-train's RunDirError."""

from __future__ import annotations

from pathlib import Path

from gpt_train.runs import RunDirError
from gpt_viz import run_names
from gpt_viz.run_names import RUNS, RunNameError


def resolve_run_dir(run: str | Path, runs: Path = RUNS) -> tuple[Path, bool]:
    try:
        return run_names.resolve_run_dir(run, runs)
    except RunNameError as error:
        raise RunDirError(str(error)) from None
