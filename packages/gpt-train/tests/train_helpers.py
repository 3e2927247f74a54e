"""Helpers shared by gpt-train's tests (a uniquely named module, so several packages' tests can run together)."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Callable
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


def serve_then_ctrl_c(
    *args: str, while_serving: Callable[[str], None] | None = None, preexec_fn: Callable[[], None] | None = None
) -> tuple[str, Result]:
    """`gpt-train serve ARGS` as a user runs it: its first line (where it serves), then, after `while_serving(line)`
    if given, Ctrl-C; returns that line and the process's exit code, the rest of its stdout, and its stderr."""
    command = [sys.executable, "-m", "gpt_train", "serve", *map(str, args)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn
    )
    try:
        line = process.stdout.readline()
        if while_serving is not None:
            while_serving(line)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    return line, Result(process.returncode, out, err)


@contextlib.contextmanager
def ctrl_c_in_the_final_evaluation(monkeypatch):
    """Within it, a run's final evaluation raises KeyboardInterrupt, as a Ctrl-C there does."""
    from gpt_train.trainer import Trainer

    evaluate = Trainer.evaluate

    def interrupted(self, limit):
        if self.step == self.last_step:
            raise KeyboardInterrupt
        return evaluate(self, limit)

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "evaluate", interrupted)
        yield
