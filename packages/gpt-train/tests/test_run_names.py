"""Naming a run: `gpt-train run` says where it trains; a task name stands for its newest run under ./runs
wherever a command takes a RUN (and says which it chose); the inspect and serve --help examples work as
pasted; gpt_train.load_run and its README example."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import textwrap
from pathlib import Path

import click
import pytest
from train_helpers import TINY, assert_one_line_error, serve_then_ctrl_c

import gpt_train
from gpt_train.cli import cli as group
from gpt_train.cli import main
from gpt_train.run_names import resolve_run_dir
from gpt_train.runs import RunDirError
from gpt_viz.run_names import newest_run_of

TWO_LAYER = ("--set", "n_layer=2", "--set", "n_head=4", "--steps", "60")  # the default layout: 2 layers of 4 heads
SMALL_MODADD = ("run", "--task", "modadd", "--device", "cpu", "--quiet", "--no-pictures", "--steps", "40",
                "--set", "p=23", "--set", "eval_every=10", "--set", "snapshot_every=10")  # fmt: skip


@pytest.fixture(scope="module")
def two_tiny_runs(tmp_path_factory) -> Path:
    """runs/ with an older and a newer tiny sort run (and one that never started), and a small modadd run with
    snapshots, trained once for the module."""
    folder = tmp_path_factory.mktemp("two-tiny-runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("XDG_CACHE_HOME", str(folder / "xdg-cache"))  # as every test's own (conftest)
        for name in ("sort-20260101-000000", "sort-20260102-000000"):
            try:
                main([*TINY, *TWO_LAYER, "--out", str(Path("runs") / name)])
            except SystemExit as exit_:
                assert not exit_.code
        try:  # a small grokking run that keeps snapshots, for `inspect modadd phases`
            main([*SMALL_MODADD, "--out", str(Path("runs") / "modadd-20260101-000000")])
        except SystemExit as exit_:
            assert not exit_.code
    (folder / "runs" / "sort-20991231-000000").mkdir()  # no config.json: not a run
    return folder / "runs"


@pytest.fixture
def runs_here(two_tiny_runs, tmp_path, monkeypatch) -> Path:
    """A working directory of this test's own whose runs/ is a copy of `two_tiny_runs`."""
    shutil.copytree(two_tiny_runs, tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_says_where_it_trains_before_it_starts(cli, tmp_path):
    run_dir = tmp_path / "named"
    result = cli(*[arg for arg in TINY if arg != "--quiet"], "--out", run_dir)
    assert result.code == 0, result.err
    assert result.out.splitlines()[0] == f"training sort in {run_dir}"


def test_a_task_name_is_its_newest_run_and_an_existing_path_is_itself(runs_here):
    assert newest_run_of("sort") == Path("runs/sort-20260102-000000")
    assert resolve_run_dir("sort") == (Path("runs/sort-20260102-000000"), True)
    assert resolve_run_dir("runs/sort-20260101-000000") == (Path("runs/sort-20260101-000000"), False)
    with pytest.raises(RunDirError, match=r"run directory addition does not exist, and runs/ holds no 'addition' run"):
        resolve_run_dir("addition")
    assert newest_run_of("../sort") is None
    with pytest.raises(RunDirError, match=r"^run directory runs/sort-1 does not exist$"):
        resolve_run_dir("runs/sort-1")


def test_the_newest_run_is_the_last_written_whatever_its_name(runs_here):
    """`--out runs/sort-rope` names a sort run too, and "sort-rope" sorts after every dated name."""
    shutil.copytree(runs_here / "runs/sort-20260101-000000", runs_here / "runs/sort-rope")
    dated = (runs_here / "runs/sort-20260102-000000/config.json").stat().st_mtime_ns
    os.utime(runs_here / "runs/sort-rope/config.json", ns=(dated - 10**9, dated - 10**9))  # written a second before
    assert newest_run_of("sort") == Path("runs/sort-20260102-000000")
    os.utime(runs_here / "runs/sort-rope/config.json", ns=(dated + 10**9, dated + 10**9))  # and a second after
    assert newest_run_of("sort") == Path("runs/sort-rope")


def test_a_task_name_finds_only_runs_of_that_task(runs_here):
    """`runs/sort-addition-check`, an addition run written later, was "the newest sort run", and eval scored it."""
    shutil.copytree(runs_here / "runs/modadd-20260101-000000", runs_here / "runs/sort-modadd-check")
    assert newest_run_of("sort") == Path("runs/sort-20260102-000000")
    assert newest_run_of("modadd") == Path("runs/modadd-20260101-000000")
    assert newest_run_of("sort-modadd-check") == Path("runs/sort-modadd-check")  # a run's own name finds it


def test_a_run_written_to_runs_slash_its_task_name_is_found_by_that_name(runs_here):
    """`--out runs/addition` (as gpt-viz's README does) and then `gpt-viz curves addition` said runs/ held none."""
    shutil.copytree(runs_here / "runs/sort-20260102-000000", runs_here / "runs/sort")
    dated = (runs_here / "runs/sort-20260102-000000/config.json").stat().st_mtime_ns
    os.utime(runs_here / "runs/sort/config.json", ns=(dated + 10**9, dated + 10**9))
    assert resolve_run_dir("sort") == (Path("runs/sort"), True)


def test_commands_taking_a_run_take_a_task_name_and_say_which_run_they_chose(cli, runs_here):
    result = cli("inspect", "sort", "logit-lens", "--examples", 100, "--device", "cpu")
    assert result.code == 0, result.err
    assert "using runs/sort-20260102-000000 (the newest sort run)" in result.err
    assert (runs_here / "runs/sort-20260102-000000/inspect_logit_lens.json").is_file()
    assert_one_line_error(cli("inspect", "nosuchtask", "heads"), "holds no 'nosuchtask' run")


def help_examples(command: click.Command, ctx: click.Context) -> list[str]:
    """The `gpt-train ...` lines under "Examples:" in the help of `command` and of its subcommands."""
    lines = [line.strip() for line in command.get_help(ctx).splitlines()]
    examples = [line.split("  #")[0].strip() for line in lines if line.startswith("gpt-train ")]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            examples += help_examples(sub, click.Context(sub, info_name=name, parent=ctx))
    return examples


def test_every_inspect_help_example_works_when_pasted(cli, runs_here):
    ctx = click.Context(group, info_name="gpt-train")
    inspect = group.get_command(ctx, "inspect")
    examples = help_examples(inspect, click.Context(inspect, info_name="inspect", parent=ctx))
    assert len(examples) >= 12
    for example in dict.fromkeys(examples):
        result = cli(*shlex.split(example)[1:])
        assert result.code == 0, (example, result.err)


def test_every_serve_help_example_serves_when_pasted_and_stops_on_ctrl_c(runs_here):
    ctx = click.Context(group, info_name="gpt-train")
    serve = group.get_command(ctx, "serve")
    examples = help_examples(serve, click.Context(serve, info_name="serve", parent=ctx))
    assert examples == ["gpt-train serve sort", "gpt-train serve sort --port 8000",
                        "gpt-train serve sort --allow-host devbox.example"]  # fmt: skip
    for example in examples:
        line, result = serve_then_ctrl_c(*shlex.split(example)[2:])
        assert re.fullmatch(
            r"serving runs/sort-20260102-000000 at http://127\.0\.0\.1:\d+/ \(Ctrl-C stops\)\n", line
        ), (line, result.err)
        assert result.code == 0 and result.out.strip() == "stopped"


ROOT = Path(__file__).resolve().parents[3]


def readme_example(readme: Path) -> str:
    """The Python block of a README that draws one head's attention, as a reader pastes it."""
    blocks = re.findall(r"^ *```python\n(.*?)^ *```", readme.read_text(), flags=re.MULTILINE | re.DOTALL)
    (block,) = [textwrap.dedent(code) for code in blocks if "attention_map" in code]
    return block


def test_the_readme_example_draws_one_head_on_the_prompt_and_its_answer(cli, tmp_path, monkeypatch):
    """The example of the README's "Start here" path, pasted (gpt-train's README holds the same), on a sort run of
    6 digits like the default one: it reads the 6 prompt digits and 5 answer digits, and marks where they meet."""
    example = readme_example(ROOT / "README.md")
    assert example == readme_example(ROOT / "packages" / "gpt-train" / "README.md")
    run = tmp_path / "runs" / "sort-20260101-000000"
    assert cli(*TINY, *TWO_LAYER, "--set", "length=6", "--out", run).code == 0
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, "README example", "exec"), namespace)
    assert len(namespace["ids"]) == 6 + 5
    (heatmap,) = [ax for ax in namespace["figure"].axes if ax.get_images()]
    assert {tuple(line.get_xdata()) for line in heatmap.get_lines()} >= {(5.5, 5.5)}  # the prompt ends after 6
    assert (tmp_path / "head.png").stat().st_size > 5_000


def test_load_run_returns_the_model_its_task_and_its_config(runs_here):
    run = gpt_train.load_run("runs/sort-20260101-000000")
    assert run.config.task == "sort" and run.task.name == "sort" and run.step == 60
    assert run.model.config.n_layer == 2 and not run.model.training
    assert run.run_dir == Path("runs/sort-20260101-000000")
    assert gpt_train.load_run("sort").run_dir == Path("runs/sort-20260102-000000")


def test_the_final_evaluation_shows_its_progress_in_examples(cli, tmp_path, monkeypatch):
    import gpt_train.progress as progress

    bars = {}

    class Recorded(progress.tqdm):
        def close(self):  # tqdm closes again when collected: one entry per bar
            bars[id(self)] = (self.desc, self.n, self.total)
            super().close()

    monkeypatch.setattr(progress, "tqdm", Recorded)
    result = cli(*[arg for arg in TINY if arg != "--quiet"], "--out", tmp_path / "progress")
    assert result.code == 0, result.err
    assert "evaluating heldout:" in result.err
    evaluations = [bar for bar in bars.values() if bar[0].startswith("evaluating")]
    ((desc, counted, total),) = evaluations  # the final evaluation only, not the ones during training
    final = json.loads((tmp_path / "progress" / "final.json").read_text())
    assert desc == "evaluating heldout" and counted == total == final["heldout_examples"]
