"""`gpt-train learn`: list, start, check and train, the graded exercises of gpt_train.learn."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from gpt_train.cli.group import CONTEXT, CommandError
from gpt_train.cli.options import finite
from gpt_train.devices import resolve_device
from gpt_train.errors import TrainError
from gpt_train.learn.isolation import LONGEST_TIME_LIMIT, TIME_LIMIT, grade_in_child
from gpt_train.learn.progress import digest, forget_pass, imported_modules, record_pass, status
from gpt_train.learn.steps import BY_NAME, DEFAULT_DIR, STEPS, stub
from gpt_train.learn.training import (
    TASK,
    compare_picture,
    finished_figure,
    learners_model_class,
    passed_kernels,
    passed_model,
    train_sort,
)
from gpt_viz import VizError

DIR_OPTION = click.option(
    "--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DIR, show_default=True,
    help="The folder your answers live in.",
)  # fmt: skip
STEP_ARGUMENT = click.argument("step_name", metavar="STEP", type=click.Choice(list(BY_NAME)))
MARK = {"passed": "[x]", "not passed": "[ ]", "not started": "[ ]"}


@click.group(invoke_without_command=True, context_settings=CONTEXT)
@click.pass_context
def learn(ctx: click.Context) -> None:
    """Rebuild gpt-core's kernels, then its GPT, its training step and its generation, one graded exercise at a
    time, then train your GPT on your own kernels.

    \b
    Start with:
      gpt-train learn start softmax      # writes my-gpt/softmax.py, a stub to fill in
      gpt-train learn check softmax      # grades it and says what is wrong
      gpt-train learn train              # sorts digits with your GPT and every kernel you have passed
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_steps)


@learn.command("list", context_settings=CONTEXT)
@DIR_OPTION
def list_steps(folder: Path) -> None:
    """The steps in order, what each teaches, and whether your folder passes it.

    \b
    Example:
      gpt-train learn list --dir my-gpt
    """
    width, digits = max(len(step.name) for step in STEPS), len(str(len(STEPS)))
    for number, step in enumerate(STEPS, 1):
        state = status(folder, step)
        click.echo(f"{MARK[state]} {f'{number}.':<{digits + 1}} {step.name.ljust(width)}  {step.teaches}  ({state})")


def command(verb: str, step: str, folder: Path) -> str:
    """The `gpt-train learn` command to paste next, naming --dir where it is not the default."""
    where = "" if folder == Path(DEFAULT_DIR) else f" --dir {shlex.quote(str(folder))}"
    return f"`gpt-train learn {verb} {step}{where}`"


@learn.command(context_settings=CONTEXT)
@STEP_ARGUMENT
@DIR_OPTION
def start(step_name: str, folder: Path) -> None:
    """Write DIR/STEP.py, the stub of the step's function, never over a file already there.

    \b
    Example:
      gpt-train learn start softmax      # writes my-gpt/softmax.py
    """
    step = BY_NAME[step_name]
    path = folder / step.file_name
    if path.exists():
        click.echo(f"{path} already exists: it is kept as it is; check it with {command('check', step.name, folder)}")
        return
    source = stub(step)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as out:  # "x": never replaces a file that appeared meanwhile
            out.write(source)
    except OSError as error:
        raise CommandError(f"cannot write {path}: {error.strerror or error}") from None
    click.echo(f"wrote {path}: write {step.signature}, then {command('check', step.name, folder)}")


@learn.command(context_settings=CONTEXT)
@STEP_ARGUMENT
@DIR_OPTION
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0, min_open=True, max=LONGEST_TIME_LIMIT),
    callback=finite,
    default=TIME_LIMIT,
    show_default=True,
    help="Seconds the check may take before it is stopped and fails, its start (about 5 s, importing torch) included.",
)
def check(step_name: str, folder: Path, time_limit: float) -> None:
    """Grade DIR/STEP.py in float64 and float32, forward and backward, on `gpt-train verify`'s cases. Your code
    runs in a process of its own, stopped after --time-limit seconds; the pass recorded is for the file as it was
    read.

    \b
    Example:
      gpt-train learn check softmax      # grades my-gpt/softmax.py
    """
    step = BY_NAME[step_name]
    path = folder / step.file_name
    if not path.exists():
        raise CommandError(f"no {path}: start it with {command('start', step.name, folder)}")
    if not path.is_file():
        raise CommandError(f"{path} is not a file (a folder, a device or a pipe): the check grades a Python file")
    try:
        source = path.read_bytes()
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from None
    graded = digest(folder, source)  # the file and the modules of the folder it imports, as the grading starts
    verdict = grade_in_child(step.name, path, source, time_limit)
    click.echo(verdict.message)
    try:
        if verdict.passed and not record_pass(folder, step, graded):
            forget_pass(folder, step)
            changed = f"{path.name} or a module it imports changed during the check"
            click.echo(f"note: not recorded as passed: {changed}; check it again", err=True)
        elif verdict.judged and not verdict.passed:  # a check stopped by its time limit says nothing of a pass
            forget_pass(folder, step)
    except OSError as error:
        raise CommandError(f"cannot record the check in {folder}: {error.strerror or error}") from None
    if not verdict.passed:
        raise click.exceptions.Exit(1)  # not SystemExit, which the command group reads as a plugin exiting


@learn.command("train", context_settings=CONTEXT)
@DIR_OPTION
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, mps or auto.")
def train_command(folder: Path, device: str) -> None:
    """Train the seed task (sort) on your GPT (once the model step passes) with every kernel you have passed, say
    how it goes at each evaluation, score the whole held-out split beside the same run on gpt-core's GPT and
    kernels, and draw the two loss curves on one picture. Your run goes to DIR/runs/mine (replaced each time);
    gpt-core's to DIR/runs/gpt-core, trained once and reused; the picture to DIR/runs/compare-loss.png.

    \b
    Example:
      gpt-train learn train              # once the model step passes
    """
    steps, model_file = passed_kernels(folder), passed_model(folder)
    if not steps and model_file is None:
        raise CommandError(f"no kernel step and no model step passed in {folder} yet: see `gpt-train learn list`")
    yours = imported_modules(folder, model_file.read_bytes()) if model_file is not None else set()  # graded with it
    unused = [step.name for step in STEPS if status(folder, step) == "not passed" and step.name not in yours]
    if unused:  # never passed, or edited since its pass: gpt-core's piece stands in, which the learner should know
        listed = ", ".join(unused)
        click.echo(f"note: not passed (yet, or since an edit), so gpt-core's stand in: {listed}; see "
                   f"{command('check', unused[0], folder)}", err=True)  # fmt: skip
    target = resolve_device(device)
    kernels = {slot: f"{step.name}:{step.function}" for slot, step in steps.items()}  # `module:function` in DIR
    yours = ", ".join(f"{slot}={step.name}" for slot, step in steps.items())
    with_kernels = f"your kernels: {yours}" if steps else "gpt-core's kernels (no kernel step passed yet)"
    runs = folder / "runs"
    try:
        if model_file is not None:
            model_class = learners_model_class(model_file)
            click.echo(f"training {TASK} on your GPT ({model_file.name}) with {with_kernels}")
        else:
            model_class = None
            click.echo(f"training {TASK} on gpt-core's GPT with {with_kernels} (pass the model step to train yours)")
        mine = train_sort(folder, kernels, runs / "mine", target, click.echo, model_class)
        theirs = finished_figure(runs / "gpt-core")
        if theirs is None:
            click.echo("training the same run on gpt-core's GPT and kernels")
            theirs = train_sort(folder, {}, runs / "gpt-core", target, click.echo)
        else:
            click.echo(f"gpt-core's GPT and kernels: the finished run in {theirs.run_dir}")
    except TrainError as error:
        raise CommandError(str(error)) from None
    who_mine = "your GPT and kernels" if model_class is not None else "your kernels"
    click.echo(f"{TASK} held-out exact match, every one of the {mine.examples:,} held-out examples, same seed:")
    width = max(len(who_mine), len("gpt-core's"))
    for who, figure in ((who_mine, mine), ("gpt-core's", theirs)):
        click.echo(f"  {who:<{width}}  {figure.exact_match:.5f}  ({figure.wrong} wrong)  {figure.run_dir}")
    try:
        picture = compare_picture(mine.run_dir, theirs.run_dir, runs / "compare-loss.png")
    except (VizError, OSError) as error:
        click.echo(f"no comparison picture: {error}")
        return
    click.echo(f"wrote {picture}: your training loss and gpt-core's, step by step "
               f"(gpt-viz compare {mine.run_dir} {theirs.run_dir} --metric loss)")  # fmt: skip
