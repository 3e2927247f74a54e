"""`gpt-train inspect RUN heads|logit-lens|patch|reads|report|phases`: each analysis prints its table and findings
and writes its record and picture into the run; `report` runs them all (see docs/results/inspect.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import click
import torch
from tqdm.auto import tqdm

import gpt_viz
from gpt_core import GPT
from gpt_tasks import PromptAnswerTask, Task
from gpt_train import lab
from gpt_train.cli.formatting import one_line
from gpt_train.cli.options import DEVICE_HELP, TRUST_KERNELS_OPTION
from gpt_train.devices import resolve_device
from gpt_train.files import write_bytes_atomically, write_json_atomically
from gpt_train.lab import InspectError, findings
from gpt_train.lab import records as record_checks
from gpt_train.lab.common import prompt_answer_task
from gpt_train.loading import load_run
from gpt_train.pictures import draw_attention_picture
from gpt_viz import HELDOUT, RunLayout
from gpt_viz import inspect_pictures as pictures
from gpt_viz.run_names import RUN

DEVICE_OPTION = click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)


class _InspectGroup(click.Group):
    """`gpt-train inspect ANALYSIS --help` shows that analysis's help: reading it needs no run. Without --help,
    an analysis named where RUN belongs is told where RUN goes."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands and not Path(args[0]).exists():
            if not any(arg in ctx.help_option_names for arg in args[1:]):
                raise click.UsageError(f"the run comes first: gpt-train inspect RUN {args[0]} (RUN: a run or a task)")
            args = ["RUN", *("--help" if arg in ctx.help_option_names else arg for arg in args)]
        return super().parse_args(ctx, args)


@click.group("inspect", cls=_InspectGroup)
@click.argument("run", metavar="RUN")
@click.pass_context
def inspect_command(ctx: click.Context, run: str) -> None:
    """Look inside a trained model: which heads it needs, where its answer appears, what it depends on.

    RUN is a run directory, or a task name for that task's newest run under ./runs. Each analysis
    prints a table and what it shows in words, and writes a JSON record and a picture into the run
    (inspect_heads.*, inspect_logit_lens.*, inspect_patch_<hook>.*, inspect_reads.*); `report` runs
    them all and writes report.html. `phases` measures grokking's phases on a modadd run from its snapshots.

    \b
    Examples:
      gpt-train inspect sort report
      gpt-train inspect sort heads
      gpt-train inspect sort heads --ablate 1.0 --ablate 1.2
      gpt-train inspect sort logit-lens
      gpt-train inspect sort patch --hook resid_pre --corrupt 0
      gpt-train inspect sort reads
      gpt-train inspect modadd phases
    """
    ctx.obj = run  # found by the analysis, after its --help


class Inspected(NamedTuple):
    """A saved run loaded for an analysis; `step` is the checkpoint read, which every record names."""

    task: Task
    model: GPT
    device: torch.device
    step: int
    layout: RunLayout


def analysis(name: str, examples: int, what: str, prompt_answer: bool = False) -> Callable:
    """Register `analyse(run, examples, **options)` as `gpt-train inspect NAME` with --examples, --device and
    --trust-kernels; a task of the wrong shape is refused before --examples is checked."""
    help = f"{what} (a fixed held-out sample; at most the split's size)."

    def decorate(analyse: Callable[..., Any]) -> Callable[..., Any]:
        @inspect_command.command(name)
        @click.option("--examples", type=click.IntRange(min=1), default=examples, show_default=True, help=help)
        @DEVICE_OPTION
        @TRUST_KERNELS_OPTION
        @click.pass_obj
        @functools.wraps(analyse)
        def command(run: str, examples: int, device: str, trust_kernels: bool, **options: Any) -> None:
            run_dir, target = RUN.convert(run, None, None), resolve_device(device)
            saved = load_run(run_dir, target, trust_kernels)
            click.echo(f"inspecting the checkpoint of step {saved.step:,}")
            run = Inspected(saved.config.build_task(), saved.model, target, saved.step, RunLayout(run_dir))
            if prompt_answer:
                prompt_answer_task(run.task, name)
            check_examples(run.task, examples)
            analyse(run, examples=examples, **options)

        return analyse

    return decorate


def check_examples(task: Task, examples: int) -> None:
    """Refuse an --examples given above the held-out examples (or text windows) the task has: a typo would score all."""
    if click.get_current_context().get_parameter_source("examples") == click.core.ParameterSource.DEFAULT:
        return  # the default is a sample size that a smaller split simply holds all of
    if isinstance(task, PromptAnswerTask):
        held = len(task.split.evaluation_ids(HELDOUT, None))
    else:  # a text task scores windows; one that does not say how many is not checked
        windows = getattr(task, "evaluation_windows", None)
        held = len(windows(HELDOUT, None)) if callable(windows) else None
    if held is not None and examples > held:
        raise InspectError(
            f"--examples {examples:,} is more than the {held:,} held-out examples of this run; "
            f"give at most {held:,} (the whole split)"
        )


def save(record: dict[str, Any], step: int, draw: Callable, paths: tuple[Path, Path], find: Callable) -> dict[str, Any]:
    """Write the record, stamped with its checkpoint's step, and the picture `draw` makes; print what `find` finds."""
    record = record | {"step": step}
    json_path, picture_path = paths
    write_json_atomically(json_path, record)
    gpt_viz.save_figure(draw(record), picture_path)
    click.echo(f"wrote {json_path} and {picture_path}")
    click.echo("findings:")
    for finding in find(record):
        click.echo(f"  - {finding}")
    return record


def scored_as(examples: float) -> Callable[[float], str]:
    """How a score over `examples` prints: with the digits that keep 7 wrong of 250,050 from reading as 1."""
    from gpt_train.cli import format_value  # cli registers this module: imported when both are loaded

    return lambda value: format_value(value, examples)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(one_line, header))] + [[one_line(cell) for cell in row] for row in rows]  # a plugin's names
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def parse_heads(values: Sequence[str], model: GPT) -> list[tuple[int, int]]:
    """LAYER.HEAD strings (or `all`) -> (layer, head) pairs, each head once (a repeat is a typo, not a weight)."""
    c = model.config
    heads = []
    for value in values:
        if value == "all":
            heads += [(layer, head) for layer in range(c.n_layer) for head in range(c.n_head)]
            continue
        layer, dot, head = value.partition(".")
        if not (dot and all(part.isascii() and part.isdecimal() for part in (layer, head))):  # not '²'.isdigit()
            raise InspectError(f"--ablate takes LAYER.HEAD (e.g. 1.2) or all, got {value!r}")
        heads.append((int(layer), int(head)))
    twice = sorted({head for head in heads if heads.count(head) > 1})
    if twice:
        named = ", ".join(f"{layer}.{head}" for layer, head in twice)
        raise InspectError(f"--ablate names head {named} more than once; name each head once (all is every head)")
    return heads


@analysis("heads", 10_000, "Held-out examples scored per ablation")
@click.option(
    "--ablate",
    multiple=True,
    metavar="LAYER.HEAD",
    help="Score with these heads removed together (repeatable; `all` is every head) instead of each alone.",
)
def inspect_heads(run: Inspected, examples: int, ablate: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """Remove each attention head in turn (zero and mean ablation), then each layer's heads together, and
    score the task's primary metric.

    Zero ablation sets the head's output to 0; mean ablation to its mean over the scored sample at the
    same position. The table and inspect_heads.json hold the metric for every head; the findings name
    the unused layers and the heads the model needs.

    \b
    Examples:
      gpt-train inspect sort heads
      gpt-train inspect sort heads --examples 2000
      gpt-train inspect sort heads --ablate all
    """
    task, model, target, step, layout = run
    if ablate:
        chosen, metric = parse_heads(ablate, model), task.primary_metric
        baseline, means = lab.baseline_and_means(task, model, target, examples)
        scores = [
            lab.ablated_metrics(task, model, target, chosen, how, examples, means)[metric] for how in lab.ABLATIONS
        ]
        named = ", ".join(f"{layer}.{head}" for layer, head in chosen)
        shown = scored_as(baseline["examples"])
        click.echo(f"{metric} on {int(baseline['examples']):,} held-out examples: {shown(baseline[metric])}")
        for how, value in zip(lab.ABLATIONS, scores, strict=True):
            click.echo(f"  with heads {named} {how}-ablated: {shown(value)}")
        return None
    c = model.config
    evaluations = 1 + len(lab.ABLATIONS) * c.n_layer * c.n_head + c.n_layer
    with tqdm(total=evaluations, desc="evaluations", leave=False) as bar:
        result = lab.ablate_each_head(task, model, target, examples, progress=bar.update)
    shown = scored_as(result.examples)
    click.echo(f"{result.metric} on {result.examples:,} held-out examples; nothing ablated: {shown(result.baseline)}")
    rows = [
        (layer, head, shown(zero), shown(result.mean[layer][head]))
        for layer, row in enumerate(result.zero)
        for head, zero in enumerate(row)
    ]
    click.echo(format_table(("layer", "head", "zero-ablated", "mean-ablated"), rows))
    rows = [(layer, shown(value)) for layer, value in enumerate(result.layer_zero)]
    click.echo(format_table(("layer", "all heads zero-ablated"), rows))
    paths = layout.heads_ablation, layout.heads_picture
    record = save(result.to_json(), step, pictures.head_ablation_heatmap, paths, findings.head_findings)
    if layout.attention.is_file():  # attention.png now shows the layer of the head the model needs most
        draw_attention_picture(layout, pictures.most_needed_head(record)[0])
    return record


@analysis("logit-lens", 10_000, "Held-out sequences decoded", True)
def inspect_logit_lens(run: Inspected, examples: int) -> dict[str, Any]:
    """Decode the residual stream after each layer through the final LayerNorm and the head.

    Prints exact match and loss per depth and the accuracy at each answer position (teacher-forced;
    at the last depth these are the model's own), and the depth where the answer appears.
    Prompt-answer tasks only.

    \b
    Examples:
      gpt-train inspect sort logit-lens
    """
    lens = lab.logit_lens(run.task, run.model, run.device, examples)
    shown = scored_as(lens.examples)
    click.echo(f"logit lens on {lens.examples:,} held-out sequences (teacher-forced)")
    header = ("read at", "exact match", "loss", *(f"acc {name}" for name in lens.answer_positions))
    rows = [
        (depth, shown(lens.exact_match[d]), f"{lens.loss[d]:.4f}", *(shown(a) for a in lens.accuracy[d]))
        for d, depth in enumerate(lens.depths)
    ]
    click.echo(format_table(header, rows))
    paths = run.layout.logit_lens, run.layout.logit_lens_picture
    return save(lens.to_json(), run.step, pictures.logit_lens_picture, paths, findings.logit_lens_findings)


@analysis("patch", 1_000, "Clean/corrupted pairs", True)
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
def inspect_patch(
    run: Inspected, point: str, examples: int, corrupt: int = 0, answer_position: int | None = None
) -> dict[str, Any]:
    """Copy one activation from a clean run into a corrupted one, at each layer and position.

    The corrupted prompt differs from the clean one in the token at --corrupt, so that the answers
    first differ at --answer-position. Each cell is the share of the clean-vs-corrupted logit difference
    there that the patch restores; the findings name the cells that restore most of it. Prompt-answer
    tasks that name their single-token corruptions (sort, addition;
    `PromptAnswerTask.single_token_corruptions`) only.

    \b
    Examples:
      gpt-train inspect sort patch
      gpt-train inspect sort patch --hook attn_out --corrupt 3 --answer-position 2
    """
    result = lab.patch(run.task, run.model, run.device, point, examples, corrupt, answer_position)
    click.echo(
        f"patching {point} on {result.examples:,} pairs (e.g. {result.example['clean']} vs "
        f"{result.example['corrupted']}); logit difference at answer position {result.answer_position}: "
        f"clean {result.clean_difference:.3f}, corrupted {result.corrupted_difference:.3f}"
    )
    rows = [(f"layer {layer}", *(f"{v:.3f}" for v in row)) for layer, row in enumerate(result.restored)]
    click.echo(format_table(("restored", *result.positions), rows))
    paths = run.layout.patching(point), run.layout.patching_picture(point)
    return save(result.to_json(), run.step, pictures.patching_picture, paths, findings.patching_findings)


@analysis("reads", 10_000, "Held-out sequences read", True)
def inspect_reads(run: Inspected, examples: int) -> dict[str, Any]:
    """What each head reads: its mean attention from the answer positions onto each prompt token, by that
    token's value (columns) and the value of the answer token just written (rows).

    Weights are times the prompt length (1.0: even over the prompt). Prompt-answer tasks with answers
    of two tokens or more only.

    \b
    Examples:
      gpt-train inspect sort reads
    """
    reads = lab.head_reads(run.task, run.model, run.device, examples)
    click.echo(
        f"what each head reads from the answer positions on {reads.examples:,} held-out sequences "
        f"(mean weight x {reads.prompt_length}; rows: the value just written, columns: the prompt token's value)"
    )
    for layer, heads_of_layer in enumerate(reads.reads):
        for head, table in enumerate(heads_of_layer):
            click.echo(f"head {layer}.{head}: weight on the answer written so far {reads.on_answer[layer][head]:.2f}")
            rows = [
                (value, *(f"{weight:.1f}" for weight in row)) for value, row in zip(reads.values, table, strict=True)
            ]
            click.echo(format_table(("written", *reads.values), rows))
    find = functools.partial(findings.reads_findings, unused=saved_minor_layers(run.layout, run.model, run.step))
    paths = run.layout.reads, run.layout.reads_picture
    return save(reads.to_json(), run.step, pictures.head_reads_picture, paths, find)


def saved_minor_layers(layout: RunLayout, model: GPT, step: int) -> list[int]:
    """The nearly unused layers of the head ablation saved beside the run, if it is of this checkpoint's model."""
    try:
        saved = pictures.load_inspection(layout.heads_ablation)
        if (
            isinstance(saved.get("step"), int) and saved["step"] != step
        ):  # another checkpoint's (the run resumed since): not this model's heads
            return []
        return findings.minor_layers(record_checks.heads(saved, model.config))
    except (gpt_viz.VizError, record_checks.Unusable, KeyError):  # none saved, or not of this model
        return []


@inspect_command.command("phases")
@DEVICE_OPTION
@TRUST_KERNELS_OPTION
@click.pass_obj
def phases_command(run: str, device: str, trust_kernels: bool) -> None:
    """Grokking's progress measures (Nanda et al. 2023) on a modadd run, from the snapshots it kept: the
    phases memorisation, circuit formation and cleanup, and what separates them.

    The key frequencies are those holding at least 5% of the trained model's number-embedding Fourier
    power. At each snapshot: the restricted loss (held-out loss of the logits' key-frequency part alone:
    the Fourier circuit), the excluded loss (training loss with that part removed) and the weight norm,
    beside each split's accuracy and loss. The table shows the phase boundaries; inspect_phases.json holds
    every snapshot and inspect_phases.png draws them, each phase shaded. The run must keep snapshots:
    train it with `gpt-train run --task modadd --set snapshot_every=20` (a minute or two on a CPU).

    \b
    Examples:
      gpt-train inspect modadd phases
    """
    from gpt_train.lab import phases  # modadd's measures, imported by the one command that needs them

    run = phases.open_snapshot_run(RUN.convert(run, None, None), resolve_device(device), trust_kernels)
    click.echo(
        f"measuring {len(run.snapshots)} snapshots with the key frequencies of the checkpoint of step {run.step:,}"
    )
    with tqdm(total=len(run.snapshots), desc="snapshots", leave=False) as bar:
        result = phases.measure_progress(run, progress=bar.update)
    first, last, count = result.records[0]["step"], result.records[-1]["step"], len(result.records)
    measured = f"{count} snapshot{'s' * (count > 1)}, steps {first:,}-{last:,}"
    click.echo(f"grokking's progress measures of {run.run_dir} ({measured}; losses in nats)")
    click.echo(format_table(phases.TABLE_HEADER, phases.table_rows(result)))
    layout = RunLayout(run.run_dir)
    title = f"{layout.name}: grokking's phases (key frequencies {', '.join(map(str, result.keys)) or 'none'})"
    draw = lambda record: gpt_viz.progress_measures(record["records"], title=title)
    paths = layout.phases, layout.phases_picture
    save(result.to_json(), run.step, draw, paths, lambda _: phases.phases_findings(result))


@analysis("report", 10_000, "Held-out examples scored per ablation, decoded by the logit lens, and read", True)
@click.option(
    "--pairs", type=click.IntRange(min=1), default=1_000, show_default=True, help="Clean/corrupted pairs patched."
)
def report_command(run: Inspected, examples: int, pairs: int) -> None:
    """Run heads, logit-lens, patch (resid_pre, attn_out, mlp_out) and reads, and write report.html into
    the run: the findings first, then each picture with its table and what it means.

    The page is one self-contained file (pictures inline, no network), readable on a phone.

    \b
    Examples:
      gpt-train inspect sort report
      gpt-train inspect sort report --examples 2000
    """
    from gpt_train.lab.report import REPORT_POINTS, report_page

    left_out: dict[str, str] = {}  # an analysis that refuses this run (an untrained model, a task it cannot read)

    def attempt(name: str, analyse: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        try:
            return analyse(run, *args)
        except InspectError as error:
            left_out[name] = str(error)
            click.echo(f"gpt-train: note: the report leaves out {name}: {error}", err=True)
            return None

    records = {
        "heads": inspect_heads(run, examples),
        "logit_lens": attempt("logit-lens", inspect_logit_lens, examples),
        "patching": {point: attempt(f"patch {point}", inspect_patch, point, pairs) for point in REPORT_POINTS},
        "reads": attempt("reads", inspect_reads, examples),
    }
    records["patching"] = {point: record for point, record in records["patching"].items() if record is not None}
    records = {key: record for key, record in records.items() if record is not None}
    page = report_page(run.layout, run.task.name, records, left_out)
    write_bytes_atomically(run.layout.report, page.encode("utf-8"))
    click.echo(f"wrote {run.layout.report}")
