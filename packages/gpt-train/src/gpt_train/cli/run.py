"""`gpt-train run`: train a model on a task (or continue a run), and say how it ended."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import click

from gpt_train.cli.formatting import format_value, sampled_note, wrong_count
from gpt_train.cli.group import CONTEXT, CommandError
from gpt_train.cli.options import (
    DEVICE_HELP,
    KERNEL_HELP,
    KERNEL_SET_HELP,
    KernelSetChoice,
    named_path,
    set_option,
    trust_kernels_option,
)
from gpt_train.compiling import check_compiler
from gpt_train.config import RunConfig, parse_assignments, route_data
from gpt_train.devices import approximate_parameters, resolve_device
from gpt_train.distributed import Rank
from gpt_train.kernels import default_kernel_set, parse_kernel_choices
from gpt_train.optimisation import learning_rate
from gpt_train.progress import format_loss
from gpt_train.run_names import resolve_run_dir
from gpt_train.runs import Run, new_run, opening_flags, resumed_run
from gpt_train.trainer import train
from gpt_viz import (
    EXAMPLES,
    THRESHOLD,
    TRAIN,
    RunLayout,
    VizError,
    collapses,
    first_crossing,
    load_metrics,
    metric_key,
    metric_series,
    parse_metric_key,
)


@click.command(context_settings=CONTEXT)
@click.option("--task", "task_name", help="Task to train (see `gpt-train tasks`).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--steps", type=int, help="Optimiser steps. [default: the task's]")
@click.option(
    "--batch-size",
    type=int,
    help="Sequences per optimiser step (per process under torchrun), split into --set grad_accum=N micro-batches "
    "of batch-size/N. [default: the task's]",
)
@click.option("--lr", type=float, help="Peak learning rate (after warmup). [default: the task's]")
@click.option("--weight-decay", type=float, help="AdamW weight decay on weight matrices. [default: the task's]")
@click.option(
    "--seed",
    type=int,
    help="Seed for weights and data; same seed, flags, CPU model and threads = same numbers. [default: 1337]",
)
@click.option("--out", type=click.Path(), callback=named_path, help="Run directory. [default: runs/<task>-<timestamp>]")
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=None,
    help="Train through torch.compile. Its first step is checked against an eager step on the same batch; a "
    "disagreement stops the run with one line naming the parameter. Evaluation runs eagerly. With --resume, either "
    "one changes how the run goes on (--no-compile: eagerly), as --device does.",
)
@set_option("Override a task, model or training parameter (repeatable), e.g. --set pos=rope.")
@click.option(
    "--data",
    type=click.Path(),
    callback=named_path,
    help="The corpus of tasks that read one: a UTF-8 file, or for text a directory (with --set glob=...).",
)
@click.option(
    "--resume", type=click.Path(), callback=named_path, help="Continue the run in this directory from its checkpoint."
)
@click.option("--kernels", type=KernelSetChoice(),
              help=KERNEL_SET_HELP + " [default: triton on a CUDA GPU of compute capability 8.0 or later where "
                   "Triton is installed, else fast]")  # fmt: skip
@click.option("--kernel", "kernel_pairs", multiple=True, metavar="SLOT=NAME", help=KERNEL_HELP)
@click.option(
    "--unverified", is_flag=True, help="Train with the --kernel ones even if they fail verification (recorded)."
)
@trust_kernels_option("With --resume, continue a run")
@click.option("--force", is_flag=True, help="Replace a run already in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar or summary (for scripts).")
@click.option(
    "--no-pictures",
    is_flag=True,
    help="Draw no PNGs at the end (a second or two saved, for sweeps and scripts); `gpt-viz curves RUN`, "
    "`gpt-viz attention RUN` and `gpt-viz grokking RUN` draw them later from the run's files.",
)
@click.option(
    "--init-from",
    type=click.Path(),
    callback=named_path,
    help="Start from a Hugging Face GPT-2 directory's weights (config.json, model.safetensors); text uses its "
    "tokenizer.json.",
)
def run(
    task_name,
    device,
    out,
    assignments,
    data,
    resume,
    kernel_pairs,
    unverified,
    trust_kernels,
    force,
    quiet,
    no_pictures,
    compile_,
    init_from,
    **flags,
) -> None:
    """Train a model on a task and write a run directory.

    The run directory holds config.json (everything resolved), metrics.jsonl (loss, learning rate
    and held-out metrics by step), final.json, checkpoint.safetensors (weights, optimiser and RNG
    state, written atomically every few hundred steps and at the end) and pictures. While a run
    trains, its directory is locked: a second run or --resume on it is refused. Held-out metrics are
    scored in float32 whatever --set dtype (the weights stay float32): the numbers `gpt-train eval` prints.
    On CUDA, float32 matrix products in training use TF32, as nanoGPT's do (--set tf32=false: full float32);
    evaluation never does. Run `gpt-train verify --device cuda --compile` first on a new GPU.

    Ctrl-C (or SIGTERM: a scheduler's preemption, `timeout`) stops cleanly between steps with a
    checkpoint and prints the --resume command. A run stopped before its
    first checkpoint can be started again with the same command, or with --resume. Under torchrun
    the run uses DistributedDataParallel (gloo on CPU, nccl on CUDA); rank 0 writes the directory.

    Each --kernel is verified against PyTorch (as `gpt-train verify --kernel` does) before anything is
    written, and refused if it fails; config.json records the kernels, and eval, sample and --resume
    compute with them.

    \b
    Examples:
      gpt-train run --task sort
      gpt-train run --task sort --device cuda --steps 4000
      gpt-train run --task sort --device cuda --compile --set tf32=false
      gpt-train run --task sort --set pos=rope --set n_layer=4 --out runs/sort-rope
      gpt-train run --task sort --set dtype=bf16 --set grad_accum=4   # bf16 autocast, 4 micro-batches of 32
      gpt-train run --task shakespeare --data tinyshakespeare.txt
      gpt-train run --task text --data notes/ --set glob='**/*.md' --set tokenizer=bpe
      gpt-train run --task sort --kernels reference                  # the plain-autograd definitions
      gpt-train run --task sort --device cuda --kernels fast         # not the triton set, CUDA's default
      gpt-train run --task sort --kernel attention=flash # after pip install ./examples/gpt-kernel-flash
      gpt-train run --task text --data novel.txt --init-from gpt2/ --set block_size=256
      gpt-train run --resume runs/sort-rope
      gpt-train run --resume sort                           # the newest runs/sort-* run
      torchrun --nproc_per_node 4 -m gpt_train run --task sort --device cuda
    """
    flags["compile"] = compile_
    given = {name: value for name, value in flags.items() if value is not None}
    rank = Rank.from_env()
    target = rank.device_for(resolve_device(device, rank.distributed))
    compile_now = None
    if resume is not None:
        from_dir = {"init_from": init_from} if init_from is not None else {}
        from_dir |= {"out": out} if out is not None else {}
        compile_now = given.pop("compile", None)  # how it goes on, as --device: not a setting of the run
        _refuse_settings_on_resume(given | from_dir, assignments, data, force, kernel_pairs, unverified)
        if compile_now:
            check_compiler(target, resumed=True)
        handed = resumed_run(resolve_run_dir(resume)[0], task_name, target, rank, trust_kernels, compile_now)
    else:
        if task_name is None:
            raise CommandError("--task is required (or --resume DIR to continue a run); see `gpt-train tasks`")
        if trust_kernels:
            raise CommandError("--trust-kernels applies to --resume; a new run's --kernel choices are named already")
        if unverified and not kernel_pairs:
            raise CommandError("--unverified applies to --kernel choices; there are none")
        kernels = parse_kernel_choices(kernel_pairs)
        values = parse_assignments(assignments)
        if data is not None and {"data", "task.data"} & values.keys():
            raise CommandError("--data and --set data both name the corpus; give it once")
        values |= route_data(task_name, data)
        for name in given:
            if twice := sorted({name, f"train.{name}"} & values.keys()):
                flag = "--no-compile" if name == "compile" and not given[name] else f"--{name.replace('_', '-')}"
                raise CommandError(f"{flag} and --set {twice[0]} both set {name}; give it once")
        values |= {f"train.{name}": value for name, value in given.items()}
        if not {"kernels", "train.kernels"} & values.keys():
            values["train.kernels"] = default_kernel_set(target)
        if given.get("compile"):
            check_compiler(target)  # before anything is written
        handed = new_run(task_name, values, out, force, target, rank, kernels, unverified, init_from)
    outcome = train(handed, quiet=quiet, pictures=not no_pictures, on_start=lambda: _announce(handed, resume, quiet))
    if rank.is_main and outcome.pictures_problem:
        click.echo(f"gpt-train: warning: pictures not drawn ({outcome.pictures_problem})", err=True)
    if outcome.reason in ("interrupted", "diverged") and not rank.is_main:
        raise click.exceptions.Exit(130 if outcome.reason == "interrupted" else 1)  # rank 0 says why, once
    if outcome.reason == "interrupted":  # a run that stopped early ends the command with its reason and exit status
        again = resume_hint(rank, handed.layout.root) + opening_flags(handed.config)  # the same ranks, batches
        again += {True: " --compile", False: " --no-compile"}.get(compile_now, "")  # as this process went on
        raise CommandError(f"interrupted at step {outcome.step}; {outcome.detail}. {again}", exit_code=130)
    if outcome.reason == "diverged":
        raise CommandError(outcome.detail, exit_code=1)
    if rank.is_main and not quiet:
        sampled = sampled_note(handed.task, "heldout")
        per_example = handed.task.primary_metric in handed.task.per_example_metrics
        click.echo(summary(handed.config, outcome.final, handed.layout.root, sampled, per_example))


def resume_hint(rank: Rank, run_dir: Path) -> str:
    """The command that resumes `run_dir` on this run's processes: per node, and nodes, as torchrun started it."""
    where = shlex.quote(str(run_dir))  # pasted as printed, a space in the path included
    if not rank.distributed:
        return f"Resume with: gpt-train run --resume {where}"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", rank.world_size))
    if per_node == rank.world_size:
        return f"Resume with: torchrun --nproc_per_node {per_node} -m gpt_train run --resume {where}"
    nodes = f"--nnodes {rank.world_size // per_node} --nproc_per_node {per_node}"
    return f"Resume on each node, with its rendezvous options: torchrun {nodes} -m gpt_train run --resume {where}"


def _announce(handed: Run, resume: Path | None, quiet: bool) -> None:
    """What is trained where, once the trainer is built (so never for a run that already finished)."""
    if not handed.rank.is_main or quiet:
        return
    click.echo(f"{'continuing' if resume is not None else 'training'} {handed.config.task} in {handed.layout.root}")
    s = handed.config.train
    snapshots = s.steps // s.snapshot_every + 1 if s.snapshot_every else 0
    size = snapshots * 4 * approximate_parameters(handed.config.model)  # float32 weights each
    if resume is None and size > SNAPSHOTS_NOTED:
        gib = size / 2**30
        click.echo(
            f"gpt-train: note: snapshot_every={s.snapshot_every} keeps {snapshots:,} copies of the weights, about "
            f"{f'{gib:,.0f}' if gib >= 100 else f'{gib:.3g}'} GiB in {handed.layout.root / RunLayout.SNAPSHOTS}",
            err=True,
        )
    if resume is None and s.warmup_steps > s.steps:
        click.echo(
            f"gpt-train: note: the run ends inside its warm-up ({s.steps:,} of warmup_steps {s.warmup_steps:,}): the "
            f"learning rate reaches {learning_rate(s.steps - 1, s):.3g}, not lr {s.lr:g}",
            err=True,
        )


SNAPSHOTS_NOTED = 2**30  # bytes of snapshots a run is told of as it starts


def _refuse_settings_on_resume(given: dict[str, Any], assignments, data, force: bool, kernels, unverified) -> None:
    named = [f"--{name.replace('_', '-')}" for name in given]
    named += ["--set"] * bool(assignments) + ["--data"] * (data is not None) + ["--force"] * force
    named += ["--kernel"] * bool(kernels) + ["--unverified"] * unverified
    if named:
        raise CommandError(
            f"--resume continues a run with its saved configuration; drop {', '.join(sorted(set(named)))}"
        )


def summary(
    config: RunConfig, final: dict[str, Any], run_dir: Path, sampled: str = "", per_example: bool = False
) -> str:
    """The end-of-run line; a primary metric the task declares per-example (`per_example`: a share of its examples
    right, as exact_match) says how many were wrong, so 7 errors never read as none. Any other (a share of tokens
    right) gives its example count alone: a count of wrong examples can be read from no other score."""
    primary = config.primary_metric
    parsed = parse_metric_key(primary)
    examples = final.get(metric_key(parsed.split, EXAMPLES)) if parsed else None
    value = final[primary]
    over = f" over {examples:,.0f} examples" if examples else ""
    wrong = wrong_count(value, examples) if examples and per_example and config.higher_is_better else None
    if wrong is not None:
        over = f" ({wrong:,} of {examples:,.0f} wrong)"
    over += f" ({sampled})" if sampled else ""
    course = held_out_course(config, run_dir)
    loss = "not recorded" if final["loss"] is None else format_loss(final["loss"])  # a checkpoint without it
    shown = format_value(value, examples) if config.higher_is_better else format_loss(value)
    return (
        f"{config.task}: {final['step']} steps in {final['elapsed']:.1f}s; "
        f"{primary} {shown}{over}{course}; final loss {loss}; run in {run_dir}"
    )


def held_out_course(config: RunConfig, run_dir: Path) -> str:
    """For a run scoring its train split too (grokking): since when the held-out score has stayed at or above the
    threshold, and how often it fell below it after first reaching it; "" for any other run."""
    if TRAIN not in config.eval_splits or not config.higher_is_better:
        return ""
    try:
        steps, values = metric_series(load_metrics(run_dir), config.primary_metric)
    except VizError:
        return ""
    first = first_crossing(steps, values, THRESHOLD)
    if first is None:
        return f", never at or above {THRESHOLD:g}"
    spans = collapses(steps, values, THRESHOLD)
    if not spans:
        return f", at or above {THRESHOLD:g} since step {first:,}"
    times = "once" if len(spans) == 1 else f"{len(spans)} times"
    start, end = spans[-1]
    since = f"(first reached at step {first:,}; fell below it {times} since)"
    if end is None:
        return f", below {THRESHOLD:g} from step {start:,} to the end {since}"
    return f", at or above {THRESHOLD:g} since step {end:,} {since}"
