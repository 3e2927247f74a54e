"""Helpers shared by gpt-train's tests (a uniquely named module, so several packages' tests can run together)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpt_viz import RunLayout

# A sort run small enough for tests: 4-digit sequences (10,000 examples), one thin layer.
TINY = (
    "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "30", "--batch-size", "32",
    "--set", "length=4", "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2",
    "--set", "eval_every=10", "--set", "eval_limit=200", "--set", "checkpoint_every=10", "--set", "log_every=5",
    "--no-pictures",  # drawing them is most of such a run's time; the tests of the pictures draw them
)  # fmt: skip


@dataclass
class Result:
    code: int
    out: str
    err: str


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / RunLayout.METRICS).read_text().splitlines()]


def is_count_of(fraction: float, n: float) -> bool:
    """Whether `fraction` is k / n for a whole number k of examples, as an exact-match score must be."""
    return 0 <= fraction <= 1 and abs(fraction * n - round(fraction * n)) < 1e-9 * n


def assert_one_line_error(result: Result, *fragments: str, code: int = 2) -> None:
    assert result.code == code, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("gpt-train: error: ")
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
