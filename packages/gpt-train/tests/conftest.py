"""Shared helpers: run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpt_train.cli import main

# A sort run small enough for tests: 4-digit sequences (10,000 examples), one thin layer.
TINY = (
    "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "30", "--batch-size", "32",
    "--set", "length=4", "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2",
    "--set", "eval_every=10", "--set", "eval_limit=200", "--set", "checkpoint_every=10", "--set", "log_every=5",
)  # fmt: skip


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """cli(*args) -> Result(exit code, stdout, stderr), through the real entry point."""

    def invoke(*args: str) -> Result:
        try:
            main(list(map(str, args)))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def tiny_run(cli, tmp_path) -> Path:
    """A finished tiny sort run directory."""
    run_dir = tmp_path / "tiny"
    result = cli(*TINY, "--out", run_dir)
    assert result.code == 0, result.err
    return run_dir


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_one_line_error(result: Result, *fragments: str, code: int = 2) -> None:
    assert result.code == code, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("gpt-train: error: ")
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
