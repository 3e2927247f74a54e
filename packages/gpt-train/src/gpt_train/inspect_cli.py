"""`gpt-train inspect RUN heads|logit-lens|patch`: the analyses of gpt_train.analysis on a saved run.

Each command prints its table, and writes its record (JSON) and picture into the run directory under
the names gpt_viz.RunLayout gives them. Errors are the analyses' InspectError (a TrainError), which the
command group turns into one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import torch
from tqdm.auto import tqdm

import gpt_viz
from gpt_core import GPT
from gpt_tasks import PromptAnswerTask, Task
from gpt_train.analysis import (
    ABLATIONS,
    InspectError,
    ablate_each_head,
    ablated_metrics,
    baseline_and_means,
    logit_lens,
    patch,
)
from gpt_train.devices import resolve_device
from gpt_train.files import write_json_atomically
from gpt_train.runs import open_run
from gpt_viz import HELDOUT, RunLayout
from gpt_viz.inspect_pictures import head_ablation_heatmap, logit_lens_picture, patching_picture

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEVICE_OPTION = click.option(
    "--device", default="auto", show_default=True, help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps."
)


def examples_option(default: int, what: str) -> Callable:
    return click.option(
        "--examples",
        type=click.IntRange(min=1),
        default=default,
        show_default=True,
        help=f"{what} (a fixed held-out sample; at most the split's size).",
    )


@click.group("inspect")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.pass_context
def inspect_command(ctx: click.Context, run_dir: Path) -> None:
    """Look inside a trained model: which heads it needs, where its answer appears, what it depends on.

    Each analysis prints a table and writes a JSON record and a picture into RUN_DIR
    (inspect_heads.*, inspect_logit_lens.*, inspect_patch_<hook>.*).

    \b
    Examples:
      gpt-train inspect runs/sort heads
      gpt-train inspect runs/sort heads --ablate 1.0 --ablate 1.2
      gpt-train inspect runs/sort logit-lens
      gpt-train inspect runs/sort patch --hook resid_pre --corrupt 0
    """
    ctx.obj = run_dir


def loaded(run_dir: Path, device: str) -> tuple[Task, GPT, torch.device, int]:
    """The run's task, its model on the device, the device, and the step of the checkpoint read (which a
    run still training moves on from: every record says which model it describes)."""
    target = resolve_device(device)
    saved = open_run(run_dir, target)
    click.echo(f"inspecting the checkpoint of step {saved.step:,}")
    return saved.config.build_task(), saved.model, target, saved.step


def held_out_examples(task: Task) -> int | None:
    """How many held-out examples the task scores at most (prompt-answer examples, or text windows); None for
    a task that does not say."""
    if isinstance(task, PromptAnswerTask):
        return len(task.split.evaluation_ids(HELDOUT, None))
    windows = getattr(task, "evaluation_windows", None)
    return len(windows(HELDOUT, None)) if callable(windows) else None


def check_examples(task: Task, examples: int) -> None:
    """A given --examples bounded by the split it samples: more than it holds is refused, with what it holds,
    rather than read as the whole split (a typo of a few digits would otherwise score everything, for minutes)."""
    if click.get_current_context().get_parameter_source("examples") == click.core.ParameterSource.DEFAULT:
        return  # the default is a sample size that a smaller split simply holds all of
    held = held_out_examples(task)
    if held is not None and examples > held:
        raise InspectError(
            f"--examples {examples:,} is more than the {held:,} held-out examples of this run; "
            f"give at most {held:,} (the whole split)"
        )


def save(
    record: dict[str, Any], step: int, draw: Callable[[dict[str, Any]], Figure], json_path: Path, picture_path: Path
) -> None:
    """Write the record, stamped with the step of the checkpoint it describes, and its picture."""
    record = record | {"step": step}
    write_json_atomically(json_path, record)
    gpt_viz.save_figure(draw(record), picture_path)
    click.echo(f"wrote {json_path} and {picture_path}")


def scored_as(examples: float) -> Callable[[float], str]:
    """How a score over `examples` prints: with the digits that keep 7 wrong of 250,050 from reading as 1
    (the summary line's rule, gpt_train.cli.format_value)."""
    from gpt_train.cli import format_value  # cli registers this module: imported when both are loaded

    return lambda value: format_value(value, examples)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, under the header."""
    cells = [list(map(str, header))] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells)


# heads ---------------------------------------------------------------------------------------
def parse_heads(values: Sequence[str], model: GPT) -> list[tuple[int, int]]:
    """LAYER.HEAD strings (or `all`) -> (layer, head) pairs, each head once (a repeat is a typo, not a weight)."""
    c = model.config
    heads = []
    for value in values:
        if value == "all":
            heads += [(layer, head) for layer in range(c.n_layer) for head in range(c.n_head)]
            continue
        layer, dot, head = value.partition(".")
        if not (dot and layer.isdigit() and head.isdigit()):
            raise InspectError(f"--ablate takes LAYER.HEAD (e.g. 1.2) or all, got {value!r}")
        heads.append((int(layer), int(head)))
    twice = sorted({head for head in heads if heads.count(head) > 1})
    if twice:
        named = ", ".join(f"{layer}.{head}" for layer, head in twice)
        raise InspectError(f"--ablate names head {named} more than once; name each head once (all is every head)")
    return heads


@inspect_command.command()
@examples_option(10_000, "Held-out examples scored per ablation")
@click.option(
    "--ablate",
    multiple=True,
    metavar="LAYER.HEAD",
    help="Score with these heads removed together (repeatable; `all` is every head) instead of each alone.",
)
@DEVICE_OPTION
@click.pass_obj
def heads(run_dir: Path, examples: int, ablate: tuple[str, ...], device: str) -> None:
    """Remove each attention head in turn (zero and mean ablation) and score the task's primary metric.

    Zero ablation sets the head's output to 0; mean ablation to its mean over the scored sample at the
    same position. The table and inspect_heads.json hold the metric for every head.

    \b
    Examples:
      gpt-train inspect runs/sort heads
      gpt-train inspect runs/sort heads --examples 250050
      gpt-train inspect runs/sort heads --ablate all
    """
    task, model, target, step = loaded(run_dir, device)
    check_examples(task, examples)
    metric = task.primary_metric
    if ablate:
        chosen = parse_heads(ablate, model)
        baseline, means = baseline_and_means(task, model, target, examples)
        scores = [ablated_metrics(task, model, target, chosen, how, examples, means)[metric] for how in ABLATIONS]
        named = ", ".join(f"{layer}.{head}" for layer, head in chosen)
        shown = scored_as(baseline["examples"])
        click.echo(f"{metric} on {int(baseline['examples']):,} held-out examples: {shown(baseline[metric])}")
        for how, value in zip(ABLATIONS, scores, strict=True):
            click.echo(f"  with heads {named} {how}-ablated: {shown(value)}")
        return
    c = model.config
    with tqdm(total=1 + len(ABLATIONS) * c.n_layer * c.n_head, desc="evaluations", leave=False) as bar:
        result = ablate_each_head(task, model, target, examples, progress=bar.update)
    shown = scored_as(result.examples)
    click.echo(f"{metric} on {result.examples:,} held-out examples; nothing ablated: {shown(result.baseline)}")
    rows = [
        (layer, head, shown(result.zero[layer][head]), shown(result.mean[layer][head]))
        for layer in range(len(result.zero))
        for head in range(len(result.zero[0]))
    ]
    click.echo(format_table(("layer", "head", "zero-ablated", "mean-ablated"), rows))
    record = result.to_json()
    layout = RunLayout(run_dir)
    save(record, step, head_ablation_heatmap, layout.heads_ablation, layout.heads_picture)


# logit lens ----------------------------------------------------------------------------------
@inspect_command.command("logit-lens")
@examples_option(10_000, "Held-out sequences decoded")
@DEVICE_OPTION
@click.pass_obj
def logit_lens_command(run_dir: Path, examples: int, device: str) -> None:
    """Decode the residual stream after each layer through the final LayerNorm and the head.

    Prints exact match and loss per depth and the accuracy at each answer position (teacher-forced;
    at the last depth these are the model's own). Prompt-answer tasks only.

    \b
    Examples:
      gpt-train inspect runs/sort logit-lens
    """
    task, model, target, step = loaded(run_dir, device)
    check_examples(task, examples)
    lens = logit_lens(task, model, target, examples)
    shown = scored_as(lens.examples)
    click.echo(f"logit lens on {lens.examples:,} held-out sequences (teacher-forced)")
    header = ("read at", "exact match", "loss", *(f"acc {name}" for name in lens.answer_positions))
    rows = [
        (depth, shown(lens.exact_match[d]), f"{lens.loss[d]:.4f}", *(shown(a) for a in lens.accuracy[d]))
        for d, depth in enumerate(lens.depths)
    ]
    click.echo(format_table(header, rows))
    record = lens.to_json()
    layout = RunLayout(run_dir)
    save(record, step, logit_lens_picture, layout.logit_lens, layout.logit_lens_picture)


# patch ---------------------------------------------------------------------------------------
@inspect_command.command("patch")
@click.option(
    "--hook",
    "point",
    default="resid_pre",
    show_default=True,
    help="The block activation to patch: resid_pre, attn_out, resid_mid, mlp_out, resid_post, z, ...",
)
@click.option("--corrupt", type=int, default=0, show_default=True, help="The prompt position whose token changes.")
@click.option(
    "--answer-position",
    type=int,
    help="The answer position measured: corruptions must first change the answer there. "
    "[default: where they most often do]",
)
@examples_option(1_000, "Clean/corrupted pairs")
@DEVICE_OPTION
@click.pass_obj
def patch_command(
    run_dir: Path, point: str, corrupt: int, answer_position: int | None, examples: int, device: str
) -> None:
    """Copy one activation from a clean run into a corrupted one, at each layer and position.

    The corrupted prompt differs from the clean one in the token at --corrupt, so that the answers
    first differ at --answer-position. Each cell is the share of the clean-vs-corrupted logit difference
    there that the patch restores. Prompt-answer tasks that name their single-token corruptions (sort,
    addition; `PromptAnswerTask.single_token_corruptions`) only.

    \b
    Examples:
      gpt-train inspect runs/sort patch
      gpt-train inspect runs/sort patch --hook attn_out --corrupt 3 --answer-position 2
    """
    task, model, target, step = loaded(run_dir, device)
    check_examples(task, examples)
    result = patch(task, model, target, point, examples, corrupt, answer_position)
    click.echo(
        f"patching {point} on {result.examples:,} pairs (e.g. {result.example['clean']} vs "
        f"{result.example['corrupted']}); logit difference at answer position {result.answer_position}: "
        f"clean {result.clean_difference:.3f}, corrupted {result.corrupted_difference:.3f}"
    )
    rows = [(f"layer {layer}", *(f"{v:.3f}" for v in row)) for layer, row in enumerate(result.restored)]
    click.echo(format_table(("restored", *result.positions), rows))
    record = result.to_json()
    layout = RunLayout(run_dir)
    save(record, step, patching_picture, layout.patching(point), layout.patching_picture(point))
