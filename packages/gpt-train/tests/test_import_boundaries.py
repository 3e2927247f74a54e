"""The trainer and `gpt-train sample` stand apart from the interpretability lab (gpt_train.lab) and the course
(gpt_train.learn): importing them imports neither, so the logit lens, the explorer and the exercises cannot slow
or break training and sampling. Each import runs in a fresh interpreter, which starts with no gpt_train module."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gpt_train.cli import cli

APART = """
import importlib
import sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print("IMPORTED:", ",".join(sorted(
    name for name in sys.modules
    if name.split(".")[:2] in (["gpt_train", "lab"], ["gpt_train", "learn"]) or "logit_lens" in name
)))
"""


def lab_and_course_modules(*modules: str) -> list[str]:
    """The lab, course and logit-lens modules a fresh interpreter holds after importing `modules`."""
    done = subprocess.run([sys.executable, "-c", APART, *modules], capture_output=True, text=True, check=True)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("IMPORTED:")]
    return [name for name in line.removeprefix("IMPORTED:").strip().split(",") if name]


@pytest.mark.parametrize(
    "modules",
    [("gpt_train.trainer",), ("gpt_train.trainer", cli.lazy["sample"].module, cli.lazy["eval"].module)],
    ids=["trainer", "trainer-sample-eval"],
)
def test_the_trainer_and_sample_import_neither_the_lab_nor_the_course(modules):
    assert lab_and_course_modules(*modules) == []


def test_the_explorer_does_import_the_logit_lens():
    """The check above would see a lab module if one were imported: the explorer's command imports several."""
    imported = lab_and_course_modules(cli.lazy["serve"].module)
    assert {"gpt_train.lab.serve", "gpt_train.lab.logit_lens"} <= set(imported)


def series(version_text: str) -> tuple[int, int]:
    major, minor = version_text.split(".")[:2]
    return int(major), int(minor)


def test_the_sibling_packages_are_required_from_their_own_release_series():
    """The four packages are released together: a gpt-core of another series could lack a name gpt-train imports,
    and nothing said so before the first import failed."""
    from importlib.metadata import requires, version

    siblings = {"gpt-core", "gpt-tasks", "gpt-viz"}
    wanted = {re.match(r"[\w.-]+", r)[0]: r for r in requires("gpt-train") or [] if ";" not in r}
    assert siblings <= set(wanted), requires("gpt-train")
    for name in siblings:
        low, high = re.search(r">=([\d.]+)", wanted[name])[1], re.search(r"<([\d.]+)", wanted[name])[1]
        assert series(low) == series(version("gpt-train")) == series(version(name)), wanted[name]
        assert series(high) == (series(low)[0], series(low)[1] + 1), wanted[name]
