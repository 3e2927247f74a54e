"""The runs the lab's tests look inside, trained through the real command line in the test's own process."""

from __future__ import annotations

from pathlib import Path

from gpt_train.cli import main

TWO_LAYER_SORT = (
    "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "300", "--batch-size", "64",
    "--set", "length=4", "--set", "n_layer=2", "--set", "n_embd=32", "--set", "n_head=2",
    "--set", "eval_every=100", "--set", "eval_limit=200", "--set", "log_every=100",
)  # fmt: skip
"""4-digit sort, 2 layers of 2 heads: learned (held-out exact match above 0.99) in 300 steps, a few seconds."""


def gpt_train(*args: object) -> None:
    """`gpt-train ARGS`, failing the test unless it succeeds."""
    try:
        main([str(arg) for arg in args])
    except SystemExit as exit_:
        assert not exit_.code, f"gpt-train {' '.join(map(str, args))} failed with exit status {exit_.code}"


def trained_sort(out: Path, *extra: str) -> Path:
    """A TWO_LAYER_SORT run (with `extra` options) trained into `out`."""
    gpt_train(*TWO_LAYER_SORT, *extra, "--out", out)
    return out
