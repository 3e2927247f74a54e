"""Fixtures: run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock
from train_helpers import TINY, Result

from gpt_train.cli import main


def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test session's temporary folder, the same for every pytest-xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the workers' folders sit in it


@pytest.fixture(scope="session")
def shared_splits(tmp_path_factory) -> Path:
    """The split cache of every test of the session (`gpt_tasks.splits`): a split's file is named by its
    numbers and the encodings it hashes, and written whole, so tests and workers can share it; hashing the
    sort task's 10^6 examples again for each test that builds it would take about a second every time."""
    folder = shared_folder(tmp_path_factory) / "splits"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path, shared_splits):
    """Text tasks keep their token caches under $XDG_CACHE_HOME: a test's own folder, never the user's; the
    splits in it are the session's shared ones."""
    cache = tmp_path / "xdg-cache"
    (cache / "gpt-tasks").mkdir(parents=True)
    (cache / "gpt-tasks" / "splits").symlink_to(shared_splits, target_is_directory=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


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
    that read the default model: under pytest-xdist, once for all the workers (the first to ask trains it under
    a lock; another asking meanwhile waits for it)."""
    shared = shared_folder(tmp_path_factory)
    run_dir = shared / "default-sort"
    with FileLock(shared / "default-sort.lock"):
        if not (run_dir / "final.json").is_file():
            try:
                main(["run", "--task", "sort", "--device", "cpu", "--quiet", "--force", "--out", str(run_dir)])
            except SystemExit as exit_:
                assert not exit_.code
    return run_dir


# The order the files are handed to pytest-xdist's workers, whole files each: the files that take longest
# first, the longest of all (it trains the default sort run, then a run on the learner's kernels) first of
# all, so that the other worker fills in around them, where xdist's own order (the files with the most tests
# first) would start that one-test file last. The findings, which read the same default sort run, go last,
# by when it is there.
FIRST = ("test_learn_train.py", "test_run_names.py", "test_report.py", "test_grad_accum.py", "test_training.py")
LAST = ("test_findings.py",)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's --dist loadfile: keep the order below
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return FIRST.index(name) if name in FIRST else len(FIRST) + (name in LAST)

    items.sort(key=rank)
