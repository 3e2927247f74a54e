"""The gpt-train command line: run, tasks, eval, sample, verify."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import torch

from gpt_core import generate
from gpt_tasks.registry import default_registry
from gpt_train.config import RunConfig, parse_assignments, resolve_run_config, split_assignments
from gpt_train.devices import resolve_device
from gpt_train.distributed import Rank
from gpt_train.errors import UserError
from gpt_train.pictures import write_pictures
from gpt_train.runs import default_run_dir, load_run, prepare_run_dir
from gpt_train.trainer import Trainer, check_compiler

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEVICE_HELP = "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps. An absent device is an error."


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="gpt-train")
def cli() -> None:
    """Train, evaluate and sample hand-written GPTs on pluggable tasks.

    \b
    Start here:
      gpt-train verify                 # every hand-written piece vs PyTorch's own
      gpt-train tasks                  # the installed tasks
      gpt-train run --task sort        # train with the task's defaults
    """


# run -----------------------------------------------------------------------------------------
TRAIN_FLAGS = ("steps", "batch_size", "lr", "weight_decay", "seed", "compile")


@cli.command(context_settings=CONTEXT)
@click.option("--task", "task_name", help="Task to train (see `gpt-train tasks`).")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--steps", type=int, help="Optimiser steps. [default: the task's]")
@click.option("--batch-size", type=int, help="Sequences per step (per process under torchrun). [default: the task's]")
@click.option("--lr", type=float, help="Peak learning rate (after warmup). [default: the task's]")
@click.option("--weight-decay", type=float, help="AdamW weight decay on weight matrices. [default: the task's]")
@click.option(
    "--seed", type=int, help="Seed for weights and data; same seed + flags on CPU = same numbers. [default: 1337]"
)
@click.option("--out", type=click.Path(path_type=Path), help="Run directory. [default: runs/<task>-<timestamp>]")
@click.option("--compile", "compile_", is_flag=True, default=None, help="Train through torch.compile.")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a task, model or training parameter (repeatable), e.g. --set pos=rope.",
)
@click.option("--data", type=click.Path(path_type=Path), help="Data file for tasks that read one (shakespeare).")
@click.option(
    "--resume", type=click.Path(path_type=Path), help="Continue the run in this directory from its checkpoint."
)
@click.option("--force", is_flag=True, help="Replace a run already in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar or summary (for scripts).")
def run(task_name, device, out, assignments, data, resume, force, quiet, compile_, **flags) -> None:
    """Train a model on a task and write a run directory.

    The run directory holds config.json (everything resolved), metrics.jsonl (loss, learning rate
    and held-out metrics by step), final.json, checkpoint.safetensors (weights, optimiser and RNG
    state, written atomically every few hundred steps and at the end) and pictures.

    Ctrl-C stops cleanly with a checkpoint and prints the --resume command. Under torchrun the run
    uses DistributedDataParallel (gloo on CPU, nccl on CUDA); rank 0 writes the directory.

    \b
    Examples:
      gpt-train run --task sort
      gpt-train run --task sort --device cuda --steps 4000
      gpt-train run --task sort --set pos=rope --set n_layer=4 --out runs/sort-rope
      gpt-train run --task shakespeare --data ../shared/data/tinyshakespeare.txt
      gpt-train run --resume runs/sort-rope
      torchrun --nproc_per_node 4 -m gpt_train run --task sort --device cuda
    """
    flags["compile"] = compile_
    rank = Rank.from_env()
    target = rank.device_for(resolve_device(device))
    if resume is not None:
        config, task, run_dir = _resumed_run(resume, task_name, flags, assignments, data, force)
    else:
        config, task, run_dir = _new_run(task_name, flags, assignments, data, out, force, rank, target)
    rank.init(target)
    try:
        trainer = Trainer(config, task, run_dir, target, rank=rank, quiet=quiet, resume=resume is not None)
        final = trainer.run()
        if rank.is_main:
            pictures, problem = write_pictures(task, trainer.model, target, run_dir)
            if not quiet:
                click.echo(_summary(config, final, run_dir))
            if problem:
                click.echo(f"gpt-train: warning: pictures not drawn ({problem})", err=True)
        # Every rank leaves together: a gloo rank that tore down its group while rank 0 was still
        # drawing aborted ("terminate called without an active exception"), 4 of 72 CPU test runs.
        rank.barrier()
    finally:
        rank.shutdown()


def _new_run(task_name, flags, assignments, data, out, force, rank: Rank, device: torch.device):
    if task_name is None:
        raise UserError("--task is required (or --resume DIR to continue a run); see `gpt-train tasks`")
    if data is not None:
        assignments = (*assignments, f"data={data}")
    _check_positive(flags)
    config, task = resolve_run_config(task_name, flags, assignments)
    if config.train.compile:
        check_compiler(device)  # before anything is written
    run_dir = out if out is not None else default_run_dir(task_name)
    if rank.is_main:
        prepare_run_dir(run_dir, force)
        config.save(run_dir)
    return config, task, run_dir


def _resumed_run(resume: Path, task_name, flags, assignments, data, force):
    given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
    given += ["--set"] * bool(assignments) + ["--data"] * (data is not None) + ["--force"] * force
    if given:
        raise UserError(f"--resume continues a run with its saved configuration; drop {', '.join(sorted(set(given)))}")
    if not resume.is_dir():
        raise UserError(f"cannot resume: run directory {resume} does not exist")
    config = RunConfig.load(resume)
    if task_name is not None and task_name != config.task:
        raise UserError(f"cannot resume: {resume} is a {config.task!r} run, not {task_name!r}")
    return config, config.build_task(), resume


def _check_positive(flags: dict[str, Any]) -> None:
    for name in ("steps", "batch_size"):
        if flags.get(name) is not None and flags[name] <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {flags[name]}")


def _format_metrics(metrics: dict[str, Any]) -> str:
    shown = {k: v for k, v in metrics.items() if isinstance(v, float | int) and "position_" not in k}
    return ", ".join(f"{k} {v:,.0f}" if k.endswith("examples") else f"{k} {v:.4g}" for k, v in shown.items())


def _summary(config: RunConfig, final: dict[str, Any], run_dir: Path) -> str:
    primary = config.primary_metric
    examples = final.get(primary.split("_")[0] + "_examples")
    over = f" over {examples:,.0f} examples" if examples else ""
    return (
        f"{config.task}: {final['step']} steps in {final['elapsed']:.1f}s; "
        f"{primary} {final[primary]:.4f}{over}; final loss {final['loss']:.4f}; run in {run_dir}"
    )


# tasks ---------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def tasks(as_json: bool) -> None:
    """List every installed task and the plugin and distribution that provide it.

    \b
    Examples:
      gpt-train tasks
      gpt-train tasks --json
    """
    from gpt_tasks import list_tasks

    rows = [
        {
            "name": t.name,
            "plugin": t.plugin,
            "distribution": t.distribution,
            "version": t.version,
            "description": t.description,
        }
        for t in list_tasks()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    header = {
        "name": "TASK",
        "plugin": "PLUGIN",
        "distribution": "DISTRIBUTION",
        "version": "VERSION",
        "description": "DESCRIPTION",
    }
    keys = list(header)
    widths = {k: max(len(str(r[k])) for r in [header, *rows]) for k in keys}
    for row in [header, *rows]:
        click.echo("  ".join(str(row[k]).ljust(widths[k]) for k in keys).rstrip())


# eval ----------------------------------------------------------------------------------------
@cli.command("eval", context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--split", type=click.Choice(["heldout", "train"]), default="heldout", show_default=True)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a task parameter for this evaluation, e.g. --set length=8.",
)
@click.option("--limit", type=click.IntRange(min=1), help="Score a fixed sample of this many examples. [default: all]")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON.")
def evaluate(run_dir: Path, split: str, assignments, limit, device, as_json) -> None:
    """Evaluate a saved run on a split (the whole split unless --limit).

    \b
    Examples:
      gpt-train eval runs/sort-20261130-120000
      gpt-train eval runs/sort-rope --set length=8      # length generalisation
      gpt-train eval runs/modadd --split train --json
    """
    target = resolve_device(device)
    config, model = load_run(run_dir, target)
    task_class = default_registry().info(config.task).task_class  # the task is built once, below
    task_sets, model_sets, train_sets = split_assignments(parse_assignments(assignments), task_class)
    if model_sets or train_sets:
        raise UserError(f"eval --set takes task parameters only, not {', '.join(sorted({**model_sets, **train_sets}))}")
    task = config.build_task(task_sets)
    try:
        metrics = task.evaluate(model, split, target, limit)
    except ValueError as error:
        raise UserError(str(error)) from None
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
    else:
        click.echo(f"{config.task} {split}: {_format_metrics({f'{split}_{k}': v for k, v in metrics.items()})}")


# sample --------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--prompt", multiple=True, help="Prompt text (repeatable). [default: the task's example prompts]")
@click.option(
    "--max-new-tokens",
    type=click.IntRange(min=1),
    help="Tokens to generate; past a learned-position model's block, the last half block is the new prompt. "
    "[default: fill the block]",
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    help="0 is greedy; higher is more random.",
)
@click.option("--top-k", type=click.IntRange(min=1), help="Sample only from the k most likely tokens.")
@click.option("--no-cache", is_flag=True, help="Re-run the whole prefix each step instead of using the KV cache.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampling.")
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
def sample(run_dir: Path, prompt, max_new_tokens, temperature, top_k, no_cache, seed, device) -> None:
    """Generate text from a saved run, one line per prompt.

    \b
    Examples:
      gpt-train sample runs/sort-20261130-120000 --prompt 902714
      gpt-train sample runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 20
    """
    target = resolve_device(device)
    config, model = load_run(run_dir, target)
    task = config.build_task()
    generator = torch.Generator(device=target).manual_seed(seed)
    for text in prompt or task.example_prompts():
        if not text:
            raise UserError("--prompt must not be empty")
        try:
            ids = torch.tensor([task.encode(text)], device=target)
        except ValueError as error:
            raise UserError(f"prompt {text!r}: {error}") from None
        n_new = max_new_tokens or max(1, config.model.block_size + 1 - ids.shape[1])
        try:
            out = generate(
                model, ids, n_new, temperature, top_k, use_cache=not no_cache, generator=generator, slide=True
            )
        except ValueError as error:
            raise UserError(str(error)) from None
        click.echo(f"{text} -> {task.decode(out[0, ids.shape[1] :].tolist())}")


# verify --------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--seed", type=int, help="Fix the random inputs. [default: fresh each time]")
@click.option("--tolerance", type=float, default=1e-12, show_default=True, help="Largest |diff| accepted (float64).")
def verify(seed: int | None, tolerance: float) -> None:
    """Check every hand-written piece against the PyTorch built-in it replaces.

    Runs each component (Linear, Embedding, LayerNorm, GELU, softmax, cross-entropy, attention in
    three masking cases) and its PyTorch built-in (F.linear, F.embedding, F.layer_norm, F.gelu with
    approximate="tanh", torch.softmax, torch.log_softmax, F.cross_entropy,
    F.scaled_dot_product_attention) on the same random float64 inputs, and prints the largest
    difference of outputs and of gradients; also KV-cache decoding vs a full forward.
    Exits 1 if any difference exceeds the tolerance.

    \b
    Example:
      gpt-train verify
    """
    from gpt_core import format_report, verification_report
    from gpt_train.verify import TORCH_LABELS, torch_references

    rows = verification_report(torch_references(), seed=seed, labels=TORCH_LABELS)
    click.echo(format_report(rows))
    worst = max(max(r.forward, r.grad or 0.0) for r in rows)
    if worst > tolerance:
        raise UserError(f"largest difference {worst:.1e} exceeds {tolerance:.0e}", exit_code=1)
    click.echo(f"\nall {len(rows)} checks within {tolerance:.0e} (largest {worst:.1e})")


# entry point ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Run the CLI; bad input becomes `gpt-train: error: ...` and a non-zero exit, never a traceback."""
    try:
        code = cli.main(args=argv, prog_name="gpt-train", standalone_mode=False)
    except UserError as error:
        click.echo(f"gpt-train: error: {error}", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        click.echo(f"gpt-train: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except click.Abort:
        click.echo("gpt-train: aborted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
