"""Fixtures: run the CLI in-process and capture what a user would see."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import TINY, Result

from gpt_train.cli import main


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """Text tasks keep their token caches under $XDG_CACHE_HOME: a test's own folder, never the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


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


@pytest.fixture(scope="session")
def default_sort_run(tmp_path_factory) -> Path:
    """What `gpt-train run --task sort` makes (scored on the whole held-out split), trained once for the tests
    that read the default model."""
    run_dir = tmp_path_factory.mktemp("default") / "sort"
    try:
        main(["run", "--task", "sort", "--device", "cpu", "--quiet", "--out", str(run_dir)])
    except SystemExit as exit_:
        assert not exit_.code
    return run_dir
