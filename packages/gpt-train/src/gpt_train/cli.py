"""The gpt-train command line: run, tasks, kernels, eval, sample, verify.

The one place where errors become what a user sees: every layer below raises its own domain
error (a TrainError subclass, or gpt-tasks' TaskError and ParamError) and knows nothing of exit
codes; the command group turns each into `gpt-train: error: <one line>` and a non-zero exit, the
click way, as a ClickException.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import click
import torch

from gpt_core import generate
from gpt_tasks import SPLITS, ParamError, TaskError
from gpt_train.config import RunConfig, parse_assignments, route, route_data, task_class
from gpt_train.devices import resolve_device
from gpt_train.distributed import Rank
from gpt_train.errors import TrainError
from gpt_train.export import export
from gpt_train.hf import Pretrained
from gpt_train.inspect_cli import inspect_command
from gpt_train.kernels import (
    TOLERANCE,
    default_kernel_registry,
    first_failure,
    parse_kernel_choices,
    resolve_kernel,
    verify_kernel,
)
from gpt_train.runs import load_run, new_run, resumed_run
from gpt_train.trainer import Outcome, check_compiler, train
from gpt_viz import EXAMPLES, metric_key, parse_metric_key

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
DEVICE_HELP = "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps. An absent device is an error."
KERNEL_HELP = "Compute SLOT with kernel NAME: installed (see `gpt-train kernels`) or module:function. Repeatable."
EXIT_CODES = {"diverged": 1, "interrupted": 130}


class CommandError(click.ClickException):
    """What the user sees of any failure: one line on stderr, `gpt-train: error: ...`, and an exit status."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: object = None) -> None:
        click.echo(f"gpt-train: error: {' '.join(self.format_message().split())}", err=True)


class Aborted(CommandError):
    """Ctrl-C outside the training loop (which stops cleanly by itself): `gpt-train: aborted`, exit 130."""

    def __init__(self) -> None:
        super().__init__("aborted", exit_code=130)

    def show(self, file: object = None) -> None:
        click.echo("gpt-train: aborted", err=True)


class _Group(click.Group):
    """Turns the domain errors of every layer, and click's own usage errors, into a CommandError."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as error:
            raise CommandError(error.format_message()) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise CommandError(error.format_message()) from None
        except (TaskError, ParamError) as error:  # a LookupError's text may come quoted
            raise CommandError(str(error).strip("'\"")) from None
        except TrainError as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            raise Aborted() from None


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(package_name="gpt-train")
def cli() -> None:
    """Train, evaluate and sample hand-written GPTs on pluggable tasks.

    \b
    Start here:
      gpt-train verify                 # every hand-written piece vs PyTorch's own
      gpt-train tasks                  # the installed tasks
      gpt-train kernels                # the kernel slots and the installed kernels
      gpt-train run --task sort        # train with the task's defaults
    """


# run -----------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
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
@click.option(
    "--data",
    type=click.Path(path_type=Path),
    help="The corpus of tasks that read one: a UTF-8 file, or for text a directory (with --set glob=...).",
)
@click.option(
    "--resume", type=click.Path(path_type=Path), help="Continue the run in this directory from its checkpoint."
)
@click.option("--kernel", "kernel_pairs", multiple=True, metavar="SLOT=NAME", help=KERNEL_HELP)
@click.option(
    "--unverified", is_flag=True, help="Train with the --kernel ones even if they fail verification (recorded)."
)
@click.option("--force", is_flag=True, help="Replace a run already in --out.")
@click.option("--quiet", is_flag=True, help="No progress bar or summary (for scripts).")
@click.option(
    "--init-from",
    type=click.Path(path_type=Path),
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
    force,
    quiet,
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

    Ctrl-C stops cleanly with a checkpoint and prints the --resume command. A run stopped before its
    first checkpoint can be started again with the same command, or with --resume. Under torchrun
    the run uses DistributedDataParallel (gloo on CPU, nccl on CUDA); rank 0 writes the directory.

    Each --kernel is verified against PyTorch (as `gpt-train verify --kernel` does) before anything is
    written, and refused if it fails; config.json records the kernels, and eval, sample and --resume
    compute with them.

    \b
    Examples:
      gpt-train run --task sort
      gpt-train run --task sort --device cuda --steps 4000
      gpt-train run --task sort --set pos=rope --set n_layer=4 --out runs/sort-rope
      gpt-train run --task sort --set dtype=bf16 --set grad_accum=4   # bf16 autocast, 4 micro-batches of 32
      gpt-train run --task shakespeare --data ../shared/data/tinyshakespeare.txt
      gpt-train run --task text --data notes/ --set glob='**/*.md' --set tokenizer=bpe
      gpt-train run --task sort --kernel attention=flash
      gpt-train run --task text --data novel.txt --init-from gpt2/ --set block_size=256
      gpt-train run --resume runs/sort-rope
      torchrun --nproc_per_node 4 -m gpt_train run --task sort --device cuda
    """
    flags["compile"] = compile_
    given = {name: value for name, value in flags.items() if value is not None}
    rank = Rank.from_env()
    target = rank.device_for(resolve_device(device))
    if resume is not None:
        from_dir = {"init_from": init_from} if init_from is not None else {}
        _refuse_settings_on_resume(given | from_dir, assignments, data, force, kernel_pairs, unverified)
        handed = resumed_run(resume, task_name, target, rank)
    else:
        if task_name is None:
            raise CommandError("--task is required (or --resume DIR to continue a run); see `gpt-train tasks`")
        if unverified and not kernel_pairs:
            raise CommandError("--unverified applies to --kernel choices; there are none")
        kernels = parse_kernel_choices(kernel_pairs)
        values = parse_assignments(assignments) | route_data(task_name, data)
        values |= {f"train.{name}": value for name, value in given.items()}
        if given.get("compile"):
            check_compiler(target)  # before anything is written
        handed = new_run(task_name, values, out, force, target, rank, kernels, unverified, init_from)
    outcome = train(handed, quiet=quiet)
    if not rank.is_main:
        _exit_for(outcome, handed.layout.root)
        return
    if outcome.pictures_problem:
        click.echo(f"gpt-train: warning: pictures not drawn ({outcome.pictures_problem})", err=True)
    _exit_for(outcome, handed.layout.root)
    if not quiet:
        click.echo(_summary(handed.config, outcome.final, handed.layout.root))


def _refuse_settings_on_resume(given: dict[str, Any], assignments, data, force: bool, kernels, unverified) -> None:
    named = [f"--{name.replace('_', '-')}" for name in given]
    named += ["--set"] * bool(assignments) + ["--data"] * (data is not None) + ["--force"] * force
    named += ["--kernel"] * bool(kernels) + ["--unverified"] * unverified
    if named:
        raise CommandError(
            f"--resume continues a run with its saved configuration; drop {', '.join(sorted(set(named)))}"
        )


def _exit_for(outcome: Outcome, run_dir: Path) -> None:
    """A run that stopped early ends the command with its reason and exit status."""
    if outcome.reason == "interrupted":
        message = f"interrupted at step {outcome.step}; {outcome.detail}. Resume with: gpt-train run --resume {run_dir}"
        raise CommandError(message, exit_code=EXIT_CODES["interrupted"])
    if outcome.reason == "diverged":
        raise CommandError(outcome.detail, exit_code=EXIT_CODES["diverged"])


def format_value(value: float, examples: float | None) -> str:
    """A metric with enough digits that a score short of 1 never reads as 1: as many decimals as the
    example count has digits (0.999972 over 250,050 examples, where 4 decimals would print 1.0000)."""
    if not examples:
        return f"{value:.4g}"
    return f"{value:.{max(4, len(str(int(examples))))}f}"


def wrong_count(fraction: float, examples: float) -> int | None:
    """How many examples a per-example score (exact match, accuracy) got wrong; None when `fraction` is
    not a whole number of `examples`, so it cannot be such a score."""
    wrong = (1.0 - fraction) * examples
    return round(wrong) if 0.0 <= fraction <= 1.0 and abs(wrong - round(wrong)) < 1e-6 else None


def _format_metrics(metrics: dict[str, Any]) -> str:
    """Every summary metric (per-position details left out), with the digits its split's example count needs."""
    parts = []
    for key, value in metrics.items():
        parsed = parse_metric_key(key)
        if parsed is None or parsed.is_position_detail or not isinstance(value, float | int):
            continue
        if parsed.name == EXAMPLES:
            parts.append(f"{key} {value:,.0f}")
        else:
            parts.append(f"{key} {format_value(value, metrics.get(metric_key(parsed.split, EXAMPLES)))}")
    return ", ".join(parts)


def _summary(config: RunConfig, final: dict[str, Any], run_dir: Path) -> str:
    """The end-of-run line. A higher-is-better primary score that is a whole number of examples (the
    built-in exact match and accuracy) also says how many were wrong, so 7 errors never read as none."""
    primary = config.primary_metric
    parsed = parse_metric_key(primary)
    examples = final.get(metric_key(parsed.split, EXAMPLES)) if parsed else None
    value = final[primary]
    over = f" over {examples:,.0f} examples" if examples else ""
    wrong = wrong_count(value, examples) if examples and config.higher_is_better else None
    if wrong is not None:
        over = f" ({wrong:,} of {examples:,.0f} wrong)"
    return (
        f"{config.task}: {final['step']} steps in {final['elapsed']:.1f}s; "
        f"{primary} {format_value(value, examples)}{over}; final loss {final['loss']:.4f}; run in {run_dir}"
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
    _echo_table({"name": "TASK"} | PROVIDER_HEADER, rows)


PROVIDER_HEADER = {
    "plugin": "PLUGIN",
    "distribution": "DISTRIBUTION",
    "version": "VERSION",
    "description": "DESCRIPTION",
}


def _echo_table(header: dict[str, str], rows: list[dict[str, Any]]) -> None:
    """Columns padded to their widest cell, under a header row; `header` maps each key of the rows to its title."""
    widths = {k: max(len(str(r[k])) for r in [header, *rows]) for k in header}
    for row in [header, *rows]:
        click.echo("  ".join(str(row[k]).ljust(widths[k]) for k in header).rstrip())


# kernels -------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def kernels(as_json: bool) -> None:
    """List the kernel slots, with the signature a kernel for each must have, and every installed kernel
    with the plugin and distribution that provide it.

    A slot is a piece the model computes with a swappable function; `gpt-core` is gpt-core's own kernel
    in every slot. Kernel plugins register through the `gpt_kernels` entry-point group.

    \b
    Examples:
      gpt-train kernels
      gpt-train verify --kernel attention=flash
      gpt-train run --task sort --kernel attention=flash
    """
    from gpt_core import KERNEL_SIGNATURES

    rows = [
        {
            "slot": k.slot,
            "name": k.name,
            "plugin": k.plugin,
            "distribution": k.distribution,
            "version": k.version,
            "description": k.description,
        }
        for k in default_kernel_registry().kernels()
    ]
    if as_json:
        click.echo(json.dumps({"slots": KERNEL_SIGNATURES, "kernels": rows}, indent=2))
        return
    slots = [{"slot": slot, "signature": signature} for slot, signature in KERNEL_SIGNATURES.items()]
    _echo_table({"slot": "SLOT", "signature": "SIGNATURE"}, slots)
    click.echo()
    _echo_table({"slot": "SLOT", "name": "KERNEL"} | PROVIDER_HEADER, rows)


# eval ----------------------------------------------------------------------------------------
@cli.command("eval", context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--split", type=click.Choice(SPLITS[::-1]), default="heldout", show_default=True)
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
    """Evaluate a saved run on a split (the whole split unless --limit), in float32, as the run's own
    evaluations were, whatever dtype it trained in.

    \b
    Examples:
      gpt-train eval runs/sort-20261130-120000
      gpt-train eval runs/sort-rope --set length=8      # length generalisation
      gpt-train eval runs/modadd --split train --json
    """
    target = resolve_device(device)
    config, model = load_run(run_dir, target)
    routed = route(parse_assignments(assignments), task_class(config.task))
    if routed.model or routed.train:
        raise CommandError(
            f"eval --set takes task parameters only, not {', '.join(sorted(routed.model | routed.train))}"
        )
    task = config.build_task(routed.task)  # built once: building can hash the whole split
    try:
        metrics = task.evaluate(model, split, target, limit)
    except ValueError as error:
        raise CommandError(str(error)) from None
    if as_json:
        click.echo(json.dumps(metrics, indent=2))
    else:
        keyed = {metric_key(split, name): value for name, value in metrics.items()}
        click.echo(f"{config.task} {split}: {_format_metrics(keyed)}")


# sample --------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path), required=False)
@click.option(
    "--hf", "hf_dir", type=click.Path(path_type=Path), help="Sample from a Hugging Face GPT-2 directory instead."
)
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
def sample(run_dir: Path, hf_dir, prompt, max_new_tokens, temperature, top_k, no_cache, seed, device) -> None:
    """Generate text from a saved run, or with --hf from a GPT-2 directory and its tokenizer.json, one
    line per prompt.

    \b
    Examples:
      gpt-train sample runs/sort-20261130-120000 --prompt 902714
      gpt-train sample runs/shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 20
      gpt-train sample --hf gpt2/ --prompt "Hello, I'm a language model," --max-new-tokens 40
    """
    if (run_dir is None) == (hf_dir is None):
        raise CommandError("sample takes a RUN_DIR or --hf DIR (one of them)")
    if hf_dir is not None and not prompt:
        raise CommandError("sample --hf needs --prompt")
    target = resolve_device(device)
    if hf_dir is not None:
        task = Pretrained(hf_dir, target)
        model = task.model
    else:
        config, model = load_run(run_dir, target)
        task = config.build_task()
    generator = torch.Generator(device=target).manual_seed(seed)
    for text in prompt or task.example_prompts():
        if not text:
            raise CommandError("--prompt must not be empty")
        try:
            ids = torch.tensor([task.encode(text)], device=target)
        except ValueError as error:
            raise CommandError(f"prompt {text!r}: {error}") from None
        n_new = max_new_tokens or max(1, model.config.block_size + 1 - ids.shape[1])
        try:
            out = generate(
                model, ids, n_new, temperature, top_k, use_cache=not no_cache, generator=generator, slide=True
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        click.echo(f"{text} -> {task.decode(out[0, ids.shape[1] :].tolist())}")


cli.command(context_settings=CONTEXT)(export)


# verify --------------------------------------------------------------------------------------
@cli.command(context_settings=CONTEXT)
@click.option("--kernel", "kernel_pairs", multiple=True, metavar="SLOT=NAME",
              help="Verify this kernel instead: an installed one (see `gpt-train kernels`) or module:function. "
              "Repeatable.")  # fmt: skip
@click.option("--seed", type=int, help="Fix the random inputs. [default: fresh each time]")
@click.option(
    "--dtype",
    type=click.Choice(["fp64", "bf16"]),
    default="fp64",
    show_default=True,
    help="Run the kernels in this dtype. bf16: against the reference in float64 on the same values, "
    "the difference relative to the reference's largest |value| (or 1).",
)
@click.option(
    "--tolerance", type=float, help=f"Largest difference accepted. [default: {TOLERANCE:.0e} in fp64, 2^-4 in bf16]"
)
def verify(kernel_pairs, seed: int | None, dtype: str, tolerance: float | None) -> None:
    """Check every hand-written piece against the PyTorch built-in it replaces.

    Runs each component (Linear, Embedding, LayerNorm, GELU, softmax, cross-entropy, attention in
    several masking and shape cases) and its PyTorch built-in (F.linear, F.embedding, F.layer_norm,
    F.gelu with approximate="tanh", torch.softmax, torch.log_softmax, F.cross_entropy,
    F.scaled_dot_product_attention) on the same random float64 inputs, and prints the largest
    difference of outputs and of gradients; also KV-cache decoding vs a full forward.
    Exits 1 if any difference exceeds the tolerance.

    With --kernel SLOT=NAME, checks that kernel instead, on every case of its slot, forward and
    backward, then a whole GPT computed with it against gpt-core's own kernels (and, for attention,
    cached decoding against the full forward); a failure says which case and output differ, by how
    much and where.

    With --dtype bf16, the kernels run on bf16 inputs, as under autocast, and the tolerance is bf16's:
    2^-4 of the reference's scale, 16 roundings to bf16's 8 significant bits.

    \b
    Examples:
      gpt-train verify
      gpt-train verify --dtype bf16
      gpt-train verify --kernel attention=flash
      gpt-train verify --kernel layer_norm=mykernels:layer_norm
    """
    from gpt_core import format_report, verification_report
    from gpt_train.verify import BF16_TOLERANCE, DTYPES, TORCH_LABELS, torch_references

    torch_dtype = DTYPES[dtype]
    if tolerance is None:
        tolerance = BF16_TOLERANCE if dtype == "bf16" else TOLERANCE
    choices = parse_kernel_choices(kernel_pairs)
    if kernel_pairs and not choices:
        raise CommandError("gpt-core's own kernels are what plain `gpt-train verify` checks; run it without --kernel")
    if not choices:
        rows = verification_report(torch_references(), torch_dtype, seed=seed, labels=TORCH_LABELS)
        click.echo(format_report(rows))
        _check_rows(rows, tolerance, "")
        return
    for slot, name in choices.items():
        rows = verify_kernel(slot, resolve_kernel(slot, name), seed, torch_dtype)
        click.echo(f"kernel {slot}={name}\n{format_report(rows)}")
        _check_rows(rows, tolerance, f"kernel {slot}={name}: ")


def _check_rows(rows, tolerance: float, what: str) -> None:
    """The verdict on a report: the first failure as the one-line error (exit 1), or the all-clear."""
    failure = first_failure(rows, tolerance)
    if failure is not None:
        raise CommandError(f"{what}{failure}", exit_code=1)
    worst = max(max(r.forward, r.grad or 0.0) for r in rows)
    click.echo(f"\n{what}all {len(rows)} checks within {tolerance:.0e} (largest {worst:.1e})")


cli.add_command(inspect_command)  # gpt-train inspect RUN heads|logit-lens|patch


# entry point ---------------------------------------------------------------------------------
def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line, like the errors: `gpt-train: warning: ...`."""
    click.echo(f"gpt-train: warning: {' '.join(str(message).split())}", err=True)


def main(argv: list[str] | None = None) -> None:
    """The `gpt-train` program: the command group, with warnings shown as one line each."""
    warnings.showwarning = _show_warning
    cli.main(args=argv, prog_name="gpt-train")
