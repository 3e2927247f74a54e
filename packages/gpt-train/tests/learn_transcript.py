"""The transcripts of docs/learn.md, made by the tests that run them, and the learner's folder the learn tests write
(a uniquely named module, as train_helpers is).

A `Session` is a learner's terminal: each command goes through `gpt-train learn` in process, from the folder that
holds `my-gpt`, and what it printed is kept with the prose and code between the commands. `update_page` puts the
rendered transcript between its markers in docs/learn.md when GPT_TRAIN_WRITE_DOCS=1 is set, and otherwise checks
that the page holds it: the same commands, the same lines and words, the numbers aside (timings, differences of
rounding and figures that vary with the machine).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from click.testing import CliRunner

from gpt_train.cli.learn import learn
from gpt_train.learn.grader import Verdict, check_file
from gpt_train.learn.steps import BY_NAME

SOLUTIONS = Path(str(files("gpt_train.learn.solutions")))
IMPORTED = {"block": ("multi_head_attention",), "model": ("multi_head_attention", "block")}
"""The earlier steps' files a step's file imports."""


def write(folder: Path, step: str, source: str) -> Path:
    """`source` as the learner's file for `step` in `folder`, beside the answers of the steps it imports."""
    folder.mkdir(parents=True, exist_ok=True)
    for imported in IMPORTED.get(step, ()):
        shutil.copy(SOLUTIONS / f"{imported}.py", folder)
    path = folder / f"{step}.py"
    path.write_text(source)
    return path


def answer(step: str, *replacements: tuple[str, str]) -> str:
    """The step's answer with each (old, new) replacement made, `old` found there once."""
    source = (SOLUTIONS / f"{step}.py").read_text()
    for old, new in replacements:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def checked(folder: Path, step: str, *replacements: tuple[str, str]) -> Verdict:
    """The check's verdict on the step's answer with the replacements made, as the learner's file in `folder`."""
    return check_file(BY_NAME[step], write(folder, step, answer(step, *replacements)))


def solved(folder: Path, *steps: str) -> Path:
    """`folder` holding the answer of each step."""
    for step in steps:
        write(folder, step, answer(step))
    return folder


PAGE = Path(__file__).resolve().parents[3] / "docs" / "learn.md"
WRITE = "GPT_TRAIN_WRITE_DOCS"
NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[+-]?\d+)?")


@dataclass
class Session:
    """Prose, code and commands, in the order they came; consecutive commands share one block."""

    parts: list[tuple[str, str]] = field(default_factory=list)
    exit_code: int = 0  # the last command's

    def say(self, text: str) -> None:
        self.parts.append(("prose", text))

    def code(self, text: str) -> None:
        self.parts.append(("code", text.strip("\n")))

    def run(self, *args: str, shown: str | None = None) -> str:
        """`gpt-train learn ARGS`, shown as typed (or as `shown`); its output."""
        result = CliRunner().invoke(learn, list(args))
        self.exit_code = result.exit_code
        command = shown or "gpt-train learn " + " ".join(shlex.quote(a) for a in args)
        self.parts.append(("command", f"$ {command}\n{result.output}".rstrip("\n")))
        return result.output

    def loop(self, command: str, outputs: list[str]) -> None:
        """A shell loop shown as typed, with what its runs printed."""
        self.parts.append(("command", f"$ {command}\n" + "".join(outputs).rstrip("\n")))

    def render(self) -> str:
        blocks: list[str] = []
        for kind, text in self.parts:
            if kind == "command" and blocks and blocks[-1].startswith("```\n$ "):
                blocks[-1] = blocks[-1].removesuffix("\n```") + f"\n{text}\n```"
            elif kind == "prose":
                blocks.append(text)
            else:
                blocks.append(f"```{'python' if kind == 'code' else ''}\n{text}\n```")
        return "\n\n".join(blocks)


def markers(name: str) -> tuple[str, str]:
    return (f"<!-- transcript {name}: written by the tests (GPT_TRAIN_WRITE_DOCS=1), do not edit -->",
            f"<!-- end of transcript {name} -->")  # fmt: skip


def masked(text: str) -> str:
    """`text` with every number one sign: what the page must hold whatever the machine and the timings."""
    return NUMBER.sub("#", text)


def update_page(name: str, transcript: str, test: str) -> None:
    """Write `transcript` between its markers in docs/learn.md (GPT_TRAIN_WRITE_DOCS=1), or check that the page
    holds it, numbers aside. A checkout without docs/ (an installed package's tests) has no page to keep."""
    if not PAGE.is_file():
        return
    page = PAGE.read_text(encoding="utf-8")
    start, end = markers(name)
    assert page.count(start) == 1 and page.count(end) == 1, f"docs/learn.md has no single transcript {name}"
    before, rest = page.split(start)
    held, after = rest.split(end)
    written = f"{before}{start}\n{transcript}\n{end}{after}"
    if os.environ.get(WRITE) == "1":
        if written != page:
            PAGE.write_text(written, encoding="utf-8")
        return
    assert masked(held.strip("\n")) == masked(transcript), (
        f"docs/learn.md's transcript {name} is not what the course prints now: write it with "
        f"`{WRITE}=1 python -m pytest packages/gpt-train/tests/{test}`"
    )
