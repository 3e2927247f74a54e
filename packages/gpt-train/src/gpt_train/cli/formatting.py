"""How numbers and tables print: a score short of 1 never reads as 1, columns line up."""

from __future__ import annotations

from typing import Any

import click


def format_value(value: float, examples: float | None) -> str:
    """A metric with enough digits that a score short of 1 never reads as 1: as many decimals as the
    example count has digits (0.999972 over 250,050 examples, where 4 decimals would print 1.0000), more for a
    score over more than the examples (a token accuracy, with several tokens each) that would still round to 1."""
    if not examples:
        return f"{value:.4g}"
    decimals = max(4, len(str(int(examples))))
    while value < 1.0 and f"{value:.{decimals}f}" == f"{1:.{decimals}f}" and decimals < 17:
        decimals += 1
    return f"{value:.{decimals}f}"


def sampled_note(task: object, split: str) -> str:
    """ "a fixed sample, drawn with replacement" where `task` scores `split` on a sample, the split too large to list
    (a built-in's IndexedSplit, sort at length >= 7); else ""."""
    from gpt_tasks.splits import IndexedSplit  # torch: imported by a command, never by --help

    splits = getattr(task, "split", None)
    listed = not isinstance(splits, IndexedSplit) or splits.count(split) is not None
    return "" if listed else "a fixed sample, drawn with replacement"


def wrong_count(fraction: float, examples: float) -> int | None:
    """How many examples a per-example score (one the task declares so: exact match) got wrong; None when
    `fraction` is not a whole number of `examples`. A share of tokens can be a whole number of examples by chance,
    so whether a score is per-example is the task's to say, never read from its value."""
    wrong = (1.0 - fraction) * examples
    return round(wrong) if 0.0 <= fraction <= 1.0 and abs(wrong - round(wrong)) < 1e-6 else None


def format_metrics(metrics: dict[str, Any]) -> str:
    """Every summary metric (no per-position details), with the digits its split's example count needs."""
    from gpt_train.progress import format_loss
    from gpt_viz import EXAMPLES, metric_key, parse_metric_key  # numpy: imported by a command, never by --help

    parts = []
    for key, value in metrics.items():
        parsed = parse_metric_key(key)
        if parsed is None or parsed.is_position_detail or not isinstance(value, float | int):
            continue
        if parsed.name == EXAMPLES:
            parts.append(f"{key} {value:,.0f}")
        elif parsed.name.endswith("loss"):  # a loss prints as the run's summary prints it
            parts.append(f"{key} {format_loss(value)}")
        else:
            parts.append(f"{key} {format_value(value, metrics.get(metric_key(parsed.split, EXAMPLES)))}")
    return ", ".join(parts)


def echo_table(header: dict[str, str], rows: list[dict[str, Any]]) -> None:
    """Columns padded to their widest cell, under a header row; `header` maps each key of the rows to its title. A
    cell is one line of printable characters (a plugin's description may hold a newline or a terminal's escape)."""
    cells = [{k: one_line(row[k]) for k in header} for row in [header, *rows]]
    widths = {k: max(len(row[k]) for row in cells) for k in header}
    for row in cells:
        click.echo("  ".join(row[k].ljust(widths[k]) for k in header).rstrip())


def one_line(value: Any) -> str:
    """`value` on one line of printable characters: a line break or tab a space, anything else unprintable `?` (a
    terminal's escape byte); the spaces a cell is aligned with are kept."""
    return "".join(c if c.isprintable() else " " if c in "\n\r\t" else "?" for c in str(value))
