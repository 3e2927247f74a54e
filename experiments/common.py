"""What every experiment shares: running gpt-train, reading its run directories, writing reports."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import gpt_core
from gpt_viz import RunLayout
from gpt_viz.phases import first_at_least


def _benchmarks_common():
    """benchmarks/common.py, the one owner of the scripts' argument parser (refusals one line, exit 2) and its
    number types; loaded under its own name, as both folders name their shared module `common`."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "common.py"
    spec = importlib.util.spec_from_file_location("benchmarks_common", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


_BENCHMARKS = _benchmarks_common()
ArgumentParser, positive_int = _BENCHMARKS.ArgumentParser, _BENCHMARKS.positive_int

ROOT = Path(__file__).resolve().parents[1]
DATA_VARIABLE = "GPT_DATA"
"""The environment variable naming tiny-shakespeare (char-rnn's input.txt) for the experiments that read it."""


@dataclass
class Context:
    """Where results go and how runs are made."""

    out: Path  # reports and pictures
    runs: Path  # run directories
    quick: bool
    jobs: int = 1
    reuse: bool = False  # a finished run whose record shows the same arguments is read back, not trained again
    log: list[str] = field(default_factory=list)

    @property
    def threads(self) -> int:
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def env(self) -> dict[str, str]:
        return os.environ | {"OMP_NUM_THREADS": str(self.threads), "PYTHONUNBUFFERED": "1"}

    def machine(self) -> str:
        arch = platform.machine() or platform.processor()
        model = cpu_model()
        cpu = f"{model}, {arch}" if model and model != arch else arch
        threads = f"{self.threads} thread{'s' if self.threads > 1 else ''}"
        parallel = f"; {self.jobs} runs in parallel, {threads} each" if self.jobs > 1 else ""
        versions = f"torch {torch.__version__}, Python {platform.python_version()}"
        return f"{os.cpu_count()} CPU cores ({cpu}), device cpu, {versions}{parallel}"


def cpu_model() -> str:
    """The CPU's model name: exact single-run figures depend on it, since vector units round differently."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo") as info:
                for line in info:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    elif sys.platform == "darwin":
        try:
            command = ["sysctl", "-n", "machdep.cpu.brand_string"]
            return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return platform.processor() or platform.machine()


@dataclass
class Run:
    name: str
    run_dir: Path
    wall: float | None  # the command's wall time; None for a reused run trained before it was recorded
    final: dict[str, Any]
    metrics: list[dict[str, Any]]

    @property
    def layout(self) -> RunLayout:
        return RunLayout(self.run_dir)

    @property
    def clock(self) -> float:
        """The run's own clock at its end (training and every evaluation, without the process start)."""
        return float(self.final["elapsed"])

    def first_step(self, key: str, threshold: float) -> int | None:
        """First logged step at which `key` reaches `threshold` (None if never)."""
        return first_at_least(self.metrics, key, threshold)


def gpt_train(ctx: Context, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gpt_train", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, env=ctx.env())
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done


def record_path(ctx: Context, name: str) -> Path:
    """Beside runs/<name>: the arguments it was trained with and the command's wall time."""
    return ctx.runs / f"{name}.experiment.json"


def train(ctx: Context, name: str, args: Sequence[str], pictures: bool = False) -> Run:
    """`gpt-train run` with `args` into runs/<name>, replacing an earlier run of the same name; with
    `ctx.reuse`, a finished run recorded with the same arguments is read back instead. The run draws its
    own pictures only when a page shows them (`pictures`): the experiments draw the rest from its files."""
    run_dir, record = ctx.runs / name, record_path(ctx, name)
    args = [str(a) for a in args]
    if ctx.reuse and record.is_file() and RunLayout(run_dir).final.is_file():
        recorded = json.loads(record.read_text())
        if recorded["args"] == args:
            return read_run(name, run_dir, recorded["wall"])
    record.unlink(missing_ok=True)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    start = time.perf_counter()
    drawn = [] if pictures else ["--no-pictures"]
    gpt_train(ctx, "run", *args, "--device", "cpu", "--quiet", "--out", run_dir, *drawn)
    wall = time.perf_counter() - start
    record.write_text(json.dumps({"args": args, "wall": wall}))
    return read_run(name, run_dir, wall)


def read_run(name: str, run_dir: Path, wall: float | None) -> Run:
    layout = RunLayout(run_dir)
    final = json.loads(layout.final.read_text())
    metrics = [json.loads(line) for line in layout.metrics.read_text().splitlines()]
    return Run(name, run_dir, wall, final, metrics)


def train_all(ctx: Context, specs: dict[str, Sequence[str]]) -> dict[str, Run]:
    """Every spec trained, ctx.jobs at a time."""
    with ThreadPoolExecutor(max_workers=ctx.jobs) as pool:
        futures = {name: pool.submit(train, ctx, name, args) for name, args in specs.items()}
        return {name: future.result() for name, future in futures.items()}


def evaluate(ctx: Context, run_dir: Path, *args: str) -> dict[str, float]:
    return json.loads(gpt_train(ctx, "eval", run_dir, "--device", "cpu", "--json", *args).stdout)


def span(values: Sequence[float], form: str = "{:.0f}") -> str:
    """`a` or `a-b`: the range of a few seeds' numbers, each written with `form`."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}-{high}"


def mean_std(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def shakespeare_path(ctx: Context) -> Path:
    """tiny-shakespeare: the file $GPT_DATA names, else the shakespeare task's downloaded copy in the user cache
    (a full run downloads it there where the network allows); quick mode without either falls back to a small
    generated text, so CI needs no corpus."""
    from gpt_tasks.builtin.shakespeare import cache_path, download

    if named := os.environ.get(DATA_VARIABLE):
        if not Path(named).is_file():
            raise FileNotFoundError(f"{DATA_VARIABLE}={named}: no such file")
        return Path(named)
    cached = cache_path()
    if cached.is_file():
        return cached
    if not ctx.quick:
        try:
            return download(cached)
        except ValueError as error:
            raise FileNotFoundError(f"{error}; the experiments take it as {DATA_VARIABLE}=PATH") from error
    text = ctx.runs / "generated.txt"
    ctx.runs.mkdir(parents=True, exist_ok=True)
    speakers = ["ROMEO", "JULIET", "NURSE"]
    lines = [f"{speakers[i % 3]}:\nthe night is young and so are we, line {i}.\n\n" for i in range(3000)]
    content = "".join(lines)
    if not text.is_file() or text.read_text() != content:
        # Experiments run in parallel and each asks for this file: it is written whole (a temporary file renamed
        # over it), so a run reading it never sees it half written.
        partial = text.with_name(f"{text.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(content)
        os.replace(partial, text)
    return text


REUSED = "its runs were recorded earlier with the same arguments and read back (`--reuse`), so its time is not given"


def kept_section(path: Path, marker: str) -> str:
    """The end of the page at `path` from `marker` on (a section measured outside the experiment, which a
    regenerated page keeps); the marker alone where there is no page yet. A page without the marker is refused:
    rewriting it would drop whatever follows its generated part."""
    if not path.is_file():
        return marker + "\n"
    text = path.read_text()
    if marker not in text:
        sys.exit(f"{path} has no line {marker}: put it above the section to keep (or remove the page), then run again")
    return text[text.index(marker) :]


def report(
    ctx: Context,
    name: str,
    title: str,
    commands: Sequence[str],
    body: str,
    wall: float,
    question: str = "",
    kept: str = "",
    took: str = "",
) -> Path:
    """docs-ready markdown: the question asked, the commands, one line naming the version and the machine (with
    the experiment's wall time, or `took` where a page gives another duration), the body (tables, pictures, what
    they mean) and, after it, `kept`."""
    command_block = "\n".join(commands)
    asked = f"{question}\n\n" if question else ""
    took = took or f"the experiment takes about {wall:.0f} s"
    text = (
        f"## {title}\n\n{asked}```\n{command_block}\n```\n\n"
        f"Measured with gpt-from-scratch {gpt_core.__version__} on {ctx.machine()}; "
        f"{REUSED if ctx.reuse else took}.\n\n{body.strip()}\n"
    )
    if kept:
        text += "\n" + kept
    path = ctx.out / f"{name}.md"
    path.write_text(text)
    print(text, flush=True)
    return path


def copy_picture(ctx: Context, source: Path, name: str) -> str:
    """Copy a run's picture into the results folder; returns a markdown image link."""
    target = ctx.out / name
    shutil.copyfile(source, target)
    return f"![{name}]({name})"


def context_from_args(argv: Sequence[str] | None = None, description: str = "") -> Context:
    parser = ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny settings: checks the machinery, not the results")
    parser.add_argument(
        "--out", type=Path, help="reports and pictures [default: docs/results, or a temp dir with --quick]"
    )
    parser.add_argument("--runs", type=Path, help="run directories [default: experiments/runs]")
    parser.add_argument(
        "--jobs", type=positive_int, default=1, help="runs trained in parallel (threads are split between them)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run_all: only these experiments")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="read back a finished run whose record (runs/NAME.experiment.json) shows the same arguments, "
        "instead of training it again",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile_dir()) if args.quick else ROOT / "docs" / "results"
    runs = args.runs or (args.out / "runs" if args.quick else ROOT / "experiments" / "runs")
    args.out.mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    ctx = Context(out=args.out, runs=runs, quick=args.quick, jobs=args.jobs, reuse=args.reuse)
    ctx.only = args.only  # type: ignore[attr-defined]
    return ctx


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="gpt-experiments-")
