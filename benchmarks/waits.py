"""The waits a learner sits through, timed in two source trees side by side: `gpt-train --help`, the start-up
of `gpt-train run --task sort` up to its first step, the whole default sort run and the whole default modadd
run, each a fresh process.

    python benchmarks/waits.py --before ../before-checkout --after .
    python benchmarks/waits.py --before ../before-checkout --after . --waits help,sort-start --rounds 5

Both trees run on this interpreter, each by putting its four packages' src folders first on PYTHONPATH
(an editable install's path entries come after it), so only the source differs. The trees take turns in
every round (in alternating order), each round gives its own after / before ratio, and the table prints
the median time of each side and the median ratio with its spread. Every tree gets its own cache folder
(XDG_CACHE_HOME), filled before the first round by building the sort task once, so a run's start-up is
timed as on every run after a user's first. A run's own clock (final.json's `elapsed`: the steps and
the evaluations) is printed beside the process's wall time; the difference is start-up and the pictures.
The last two columns are the kernel's counts for each process, medians over rounds: the page faults it took
and the seconds of system time it cost (much of it zeroing the pages those faults hand over).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, positive_int, require_package  # noqa: E402

PACKAGES = ("gpt-core", "gpt-tasks", "gpt-train", "gpt-viz")
FILL_CACHE = "from gpt_tasks import get_task; get_task('sort')"
UNTIL_THE_FIRST_STEP = (
    "import os, sys; from gpt_train.trainer import Trainer; from gpt_train.cli import main\n"
    "Trainer.train_step = lambda self, step: os._exit(0)\n"
    "main()"
)
"""`gpt-train ARGS` that leaves the moment its first training step would start."""
WAITS = {
    "help": ["-m", "gpt_train", "--help"],
    "sort-start": ["-c", UNTIL_THE_FIRST_STEP, "run", "--task", "sort", "--quiet"],
    "sort": ["-m", "gpt_train", "run", "--task", "sort", "--quiet"],
    "modadd": ["-m", "gpt_train", "run", "--task", "modadd", "--quiet"],
}
"""Each wait: the interpreter's arguments."""


def environment(tree: Path, cache: Path) -> dict[str, str]:
    src = [str(tree / "packages" / name / "src") for name in PACKAGES]
    # Bytecode written (an empty PYTHONDONTWRITEBYTECODE is unset): the source trees then start as installed
    # packages do, compiled once, instead of compiling every module again in every process.
    env = {"PYTHONPATH": os.pathsep.join(src), "XDG_CACHE_HOME": str(cache), "PYTHONHASHSEED": "0"}
    return os.environ | env | {"PYTHONDONTWRITEBYTECODE": ""}


class Timing(NamedTuple):
    wall: float  # seconds
    clock: float | None  # the run's own clock (final.json's elapsed), when it finished a run directory
    faults: int  # page faults the process took (minor and major)
    system: float  # seconds the kernel spent on its behalf


def timed(args: list[str], env: dict[str, str], workdir: Path) -> Timing:
    """`python ARGS` in a fresh process, timed, with the page faults and system time the kernel counted for it."""
    out = workdir / f"run-{time.monotonic_ns()}"
    command = [sys.executable, *args, *(["--out", str(out)] if "run" in args else [])]
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    faults = after.ru_minflt + after.ru_majflt - children.ru_minflt - children.ru_majflt
    final = out / "final.json"
    clock = json.loads(final.read_text())["elapsed"] if final.is_file() else None
    return Timing(wall, clock, faults, after.ru_stime - children.ru_stime)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the source tree before (a checkout)")
    parser.add_argument("--after", type=Path, default=Path("."), help="the source tree after (default: here)")
    parser.add_argument("--waits", default=",".join(WAITS), help=f"comma-separated, of: {', '.join(WAITS)}")
    parser.add_argument("--rounds", type=positive_int, default=3)
    args = parser.parse_args()
    waits = args.waits.split(",")
    for wait in waits:
        if wait not in WAITS:
            parser.error(f"--waits: no wait {wait!r}; choose among {', '.join(WAITS)}")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for tree in trees.values():  # a tree without the packages would time whatever is installed, on both sides
        for name in PACKAGES:
            require_package(parser, tree / "packages" / name / "src", name.replace("-", "_"))
    with tempfile.TemporaryDirectory(prefix="waits-") as scratch:
        workdir = Path(scratch)
        envs = {side: environment(tree, workdir / f"cache-{side}") for side, tree in trees.items()}
        for env in envs.values():  # fill each tree's split cache, as a user's first run does
            subprocess.run([sys.executable, "-c", FILL_CACHE], env=env, check=True)
        print(f"python {sys.version.split()[0]}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
        print("| wait | before: wall (run's clock) | after: wall (run's clock) | after / before, median (spread) "
              "| page faults, before -> after | system s, before -> after |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for wait in waits:
            times: dict[str, list[Timing]] = {"before": [], "after": []}
            for r in range(args.rounds):
                for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    times[side].append(timed(WAITS[wait], envs[side], workdir))
                    print(f"  {wait} round {r + 1} {side}: {times[side][-1].wall:.2f} s", file=sys.stderr)
            ratios = [a.wall / b.wall for a, b in zip(times["after"], times["before"], strict=True)]
            cells = [_cell(times[side]) for side in ("before", "after")]
            spread = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            faults = " -> ".join(f"{statistics.median(t.faults for t in times[side]):,.0f}" for side in times)
            system = " -> ".join(f"{statistics.median(t.system for t in times[side]):.2f}" for side in times)
            print(f"| {wait} | {cells[0]} | {cells[1]} | {spread} | {faults} | {system} |")


def _cell(runs: list[Timing]) -> str:
    wall = statistics.median(run.wall for run in runs)
    clocks = [run.clock for run in runs if run.clock is not None]
    return f"{wall:.2f} s" + (f" ({statistics.median(clocks):.2f} s)" if clocks else "")


if __name__ == "__main__":
    main()
