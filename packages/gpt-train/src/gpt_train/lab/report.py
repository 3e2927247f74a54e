"""report.html: one page per run that explains the trained model, findings first, then each analysis's picture, its
table and how to read it; pictures and styles inline, so it opens offline and fetches nothing; every text
HTML-escaped (run and task names are the user's)."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpt_train.lab import findings
from gpt_viz import RunLayout
from gpt_viz.explore import filled_page

REPORT_POINTS = ("resid_pre", "attn_out", "mlp_out")  # what enters each layer, then what attention and MLP add

MEANING = {
    "heads": (
        "Each cell is the task's metric on held-out examples with one head's output replaced: by zeros (left) "
        "or by its mean over the examples (right). A dark cell is a head the model cannot do without; a cell "
        "as bright as the clean model is a head it does not need. The second table removes a whole layer's "
        f"heads at once: a layer within {findings.UNUSED_TOLERANCE:.1%} of the clean model is unused, within "
        f"{findings.NEEDED_COST:.0%} nearly unused."
    ),
    "logit-lens": (
        "The residual stream read out early, through the final LayerNorm and the output head, as if the model "
        "stopped there. The left curve is exact match at each depth; the grid splits accuracy by answer "
        f"position. The answer appears at the first depth reaching {findings.APPEARS_SHARE:.0%} of the model's "
        "exact match."
    ),
    "patching": (
        "Two prompts that differ in one token and whose answers first differ at one position. Each cell copies "
        "one activation of the clean run, at one layer and position, into the corrupted run and shows how much "
        "of the clean answer's logit advantage comes back (1: all). A cell of at least "
        f"{findings.CARRIES_SHARE:.0%} carries what the answer depends on."
    ),
    "reads": (
        "For each head: from the positions that read back an answer token, the mean attention on a prompt token, "
        "by the value just written (rows) and the prompt token's value (columns), times the prompt length (1.0: "
        "even over the prompt). A head whose bright cells lie on one side of the diagonal compares what it reads "
        f"with what was written (the rule: {findings.COMPARES_RATIO:.0f}x the weight on one side)."
    ),
}


def picture(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'


def table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """An HTML table in a scrolling box, so a wide one never widens a phone's page."""
    head = "".join(f"<th>{html.escape(str(cell))}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def findings_list(findings: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(finding)}</li>" for finding in findings) + "</ul>"


def heads_tables(record: Mapping[str, Any]) -> list[str]:
    rows = [
        (f"{layer}.{head}", f"{zero:.4f}", f"{record['mean'][layer][head]:.4f}")
        for layer, row in enumerate(record["zero"])
        for head, zero in enumerate(row)
    ]
    layers = [(layer, f"{value:.4f}") for layer, value in enumerate(record["layer_zero"])]
    return [
        table(("head", "zero-ablated", "mean-ablated"), rows),
        table(("layer", "all its heads zero-ablated"), layers),
    ]


def logit_lens_tables(record: Mapping[str, Any]) -> list[str]:
    rows = [
        (depth, f"{exact:.4f}", f"{loss:.4f}", *(f"{a:.3f}" for a in accuracy))
        for depth, exact, loss, accuracy in zip(
            record["depths"], record["exact_match"], record["loss"], record["accuracy"], strict=True
        )
    ]
    return [table(("read at", "exact match", "loss", *record["answer_positions"]), rows)]


def patching_tables(record: Mapping[str, Any]) -> list[str]:
    rows = [(f"layer {layer}", *(f"{v:.3f}" for v in row)) for layer, row in enumerate(record["restored"])]
    return [table((record["point"], *record["positions"]), rows)]


def reads_tables(record: Mapping[str, Any]) -> list[str]:
    tables = []
    for layer, heads in enumerate(record["reads"]):
        for head, grid in enumerate(heads):
            rows = [(value, *(f"{w:.1f}" for w in row)) for value, row in zip(record["values"], grid, strict=True)]
            tables.append(f"<h3>head {layer}.{head}</h3>" + table((f"{layer}.{head}", *record["values"]), rows))
    return ["<details><summary>every head's table</summary>" + "".join(tables) + "</details>"]


def report_page(
    layout: RunLayout, task: str, records: Mapping[str, Any], left_out: Mapping[str, str] | None = None
) -> str:
    """The whole page, from the records `inspect report` computed (and the pictures beside them); an analysis that
    refused the run (`left_out`: its reason) has no section, and the summary says why."""
    heads, patching = records["heads"], records["patching"]
    lens, reads = records.get("logit_lens"), records.get("reads")  # None: left out
    found = dict(findings.sections(records))

    def section(anchor: str, title: str, image: Path, tables: Sequence[str], meaning: str | None = None) -> str:
        meaning = MEANING[anchor] if meaning is None else meaning
        return (
            f'<section id="{anchor}"><h2>{html.escape(title)}</h2>{findings_list(found[anchor])}'
            f"<p>{html.escape(meaning)}</p><figure>{picture(image)}</figure>{''.join(tables)}</section>"
        )

    patches = []
    for point in (point for point in REPORT_POINTS if point in patching):
        record, example = patching[point], patching[point]["example"]
        pair = (
            f" Pairs such as {example['clean']} against {example['corrupted']}, measured at answer position "
            f"{record['answer_position']}."
        )
        title, image = f"What the answer depends on: patching {point}", layout.patching_picture(point)
        patches.append(section(f"patch-{point}", title, image, patching_tables(record), MEANING["patching"] + pair))
    sections = [section("heads", "Which heads matter: ablation", layout.heads_picture, heads_tables(heads))]
    if lens is not None:
        title = "Where the answer appears: the logit lens"
        sections.append(section("logit-lens", title, layout.logit_lens_picture, logit_lens_tables(lens)))
    sections += patches
    if reads is not None:
        sections.append(section("reads", "What each head reads", layout.reads_picture, reads_tables(reads)))
    summary = (
        f"The {task} model of {layout.name}, checkpoint of step {heads.get('step'):,}; {heads['metric']} "
        f"{heads['baseline']:.4f} on {heads['examples']:,} held-out examples."
    )
    by_reason: dict[str, list[str]] = {}  # three patching points refused for one reason are one sentence
    for name, reason in (left_out or {}).items():
        by_reason.setdefault(reason, []).append(name)
    summary += "".join(f" Left out, {', '.join(names)}: {reason}." for reason, names in by_reason.items())
    title = f"{task} — {layout.name}"
    parts = {
        "TITLE": html.escape(title),
        "SUMMARY": html.escape(summary),
        "FINDINGS": findings_list([finding for part in found.values() for finding in part]),
        "RULES": html.escape(findings.RULES),
        "SECTIONS": "".join(sections),
    }
    return filled_page("gpt_train.lab", "report_template.html", f"{title} · gpt-train report", parts)
