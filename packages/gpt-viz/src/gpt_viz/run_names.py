"""A RUN on the command line: a run directory, or a task name (`sort`) for the newest `runs/sort-*` run, since
`gpt-train run` names runs by a timestamp nobody types twice."""

from __future__ import annotations

from pathlib import Path

import click

from gpt_viz.errors import VizError
from gpt_viz.run_data import read_json_object
from gpt_viz.run_layout import RunLayout


class RunNameError(VizError):
    """A RUN that is neither a run directory nor a task with runs under ./runs."""


RUNS = Path("runs")  # where `gpt-train run` puts a run not given --out


def newest_run_of(task: str, runs: Path = RUNS) -> Path | None:
    """The newest of `runs/<task>` and the `runs/<task>-*` directories whose config.json names that task (the last
    written; by name where two tie), or None: `--out runs/sort-rope` is a run of sort too, names do not sort by
    time, and `runs/sort-addition` may be an addition run."""
    if not runs.is_dir() or "/" in task or task in (".", ".."):
        return None
    exact = [runs / task] if RunLayout(runs / task).config.is_file() else []  # `--out runs/sort-a`, named sort-a
    candidates = exact + [path for path in runs.glob(f"{task}-*") if _task_of(path) == task]
    written = lambda path: (RunLayout(path).config.stat().st_mtime_ns, path.name)
    return max(candidates, key=written) if candidates else None


def _task_of(run: Path) -> str | None:
    try:
        return read_json_object(RunLayout(run).config).get("task")
    except VizError:  # no config.json, or not one a run wrote
        return None


def resolve_run_dir(run: str | Path, runs: Path = RUNS) -> tuple[Path, bool]:
    """The run directory `run` names, and whether it was chosen as a task's newest run."""
    if str(run) == "":  # an unset shell variable: not the current directory
        raise RunNameError("the run named is empty; name a run directory or a task")
    path = Path(run)
    if path.exists():
        return path, False
    newest = newest_run_of(str(run), runs)
    if newest is not None:
        return newest, True
    if len(path.parts) > 1:  # a path, not a name
        raise RunNameError(f"run directory {path} does not exist")
    raise RunNameError(
        f"run directory {path} does not exist, and {runs}/ holds no {str(run)!r} run "
        f"(a task name means its newest {runs}/<task> or {runs}/<task>-* run)"
    )


class RunArgument(click.ParamType):
    """Says on stderr which directory a task name chose."""

    name = "RUN"

    def convert(self, value: str | Path, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path, chosen = resolve_run_dir(value)  # RunNameError: the command's one-line error
        if chosen:
            click.echo(f"using {path} (the newest {value} run)", err=True)
        return path


RUN = RunArgument()
