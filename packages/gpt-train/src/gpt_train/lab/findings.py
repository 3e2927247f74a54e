"""Findings in words: what an analysis's saved record shows, each sentence with its figure, by the rules RULES states
with the constants below (the comparison rule for digit tokens), so a finding traces to the numbers that made it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

UNUSED_TOLERANCE = 0.001
NEEDED_COST = 0.01
APPEARS_SHARE = 0.99
CARRIES_SHARE = 0.9
COMPARES_RATIO = 2.0
JUDGED = 100  # the fewest examples' worth of a metric a finding is judged on: 1% of it is then at least one example

RULES = (
    f"Rules: a layer is unused when removing all its heads moves the metric by at most {UNUSED_TOLERANCE:.1%} "
    f"(nearly unused: at most {NEEDED_COST:.0%}); "
    f"a head is needed when removing it alone costs more than {NEEDED_COST:.0%}; the answer appears at the first "
    f"depth reaching {APPEARS_SHARE:.0%} of the model's exact match; a position carries the answer's "
    f"difference when patching it restores at least {CARRIES_SHARE:.0%}; a head compares when it reads one "
    f"side of the value just written {COMPARES_RATIO:.0f}x as much as the other. Heads and depths are judged only "
    f"where the metric is worth at least {JUDGED} examples, so that 1% of it is at least one."
)
Record = Mapping[str, Any]


def _share(record: Record, difference: float) -> float:
    """`difference` as a share of the baseline (of 1 for a zero baseline), rounded so that a share exactly at a
    threshold meets it: 10 of 1,000 lost is 1%, not 1.0000000000000009%."""
    return round(difference / (abs(record["baseline"]) or 1.0), 12)


def _cost(record: Record, value: float) -> float:
    """How much worse `value` is than the baseline, as a share of it; below 0 when better."""
    baseline = record["baseline"]
    return _share(record, baseline - value if record.get("higher_is_better", True) else value - baseline)


def unused_layers(record: Record) -> list[int]:
    """The layers whose heads, all zero-ablated, move the metric (either way) by at most UNUSED_TOLERANCE."""
    shifts = [_share(record, abs(value - record["baseline"])) for value in record.get("layer_zero", [])]
    return [layer for layer, shift in enumerate(shifts) if shift <= UNUSED_TOLERANCE]


def judged(record: Record) -> bool:
    """Whether the ablation scored enough right examples (JUDGED) for a NEEDED_COST cost to tell from one example."""
    return not record.get("higher_is_better", True) or record["baseline"] * record["examples"] >= JUDGED


def minor_layers(record: Record) -> list[int]:
    """The layers unused or nearly unused: zero-ablating all their heads costs at most NEEDED_COST (none where the
    ablation cannot tell)."""
    if not judged(record):
        return []
    layers = enumerate(record.get("layer_zero", []))
    return [layer for layer, value in layers if abs(_cost(record, value)) <= NEEDED_COST]  # not one removal improves


def needed_heads(record: Record) -> list[tuple[int, int]]:
    """The costliest first."""
    costs = [
        (_cost(record, value), layer, head)
        for layer, row in enumerate(record["zero"])
        for head, value in enumerate(row)
    ]
    return [(layer, head) for cost, layer, head in sorted(costs, reverse=True) if cost > NEEDED_COST]


def head_findings(record: Record) -> list[str]:
    """Which layers are unused and which heads the model needs, from inspect_heads.json."""
    metric, baseline, examples = record["metric"], record["baseline"], record["examples"]
    if not judged(record):
        return [
            f"{metric} is {baseline:.4f} on {examples:,} examples, worth under {JUDGED} of them: a "
            f"{NEEDED_COST:.0%} cost could not be told from one example, so the heads show nothing: score more "
            "examples (--examples) or train longer"
        ]
    found = []
    for layer, value in enumerate(record.get("layer_zero", [])):
        removed, clean = f"with all its heads removed {metric} is {value:.4f}", f"clean {baseline:.4f}"
        if layer in unused_layers(record):
            found.append(f"layer {layer}'s attention is unused: {removed} ({clean}, within {UNUSED_TOLERANCE:.1%})")
        elif layer in minor_layers(record):
            found.append(
                f"layer {layer}'s attention is nearly unused: {removed} ({clean}: it costs "
                f"{_cost(record, value):.2%}, under {NEEDED_COST:.0%})"
            )
        else:
            found.append(f"layer {layer}'s attention is used: {removed} ({clean})")
    needed = needed_heads(record)
    if needed:
        named = ", ".join(f"{layer}.{head} ({record['zero'][layer][head]:.4f})" for layer, head in needed)
        found.append(
            f"heads the model needs (removing one alone costs more than {NEEDED_COST:.0%}), costliest first: {named}"
        )
    else:
        found.append(f"no single head is needed: removing any one alone costs at most {NEEDED_COST:.0%} of {metric}")
    return found


def answer_depth(record: Record) -> int | None:
    """The first depth whose exact match reaches APPEARS_SHARE of the model's own; None when that is worth under
    JUDGED examples, too few to place it."""
    exact = record["exact_match"]
    if exact[-1] * record["examples"] < JUDGED:
        return None
    return next(depth for depth, value in enumerate(exact) if value >= APPEARS_SHARE * exact[-1])


def depth_name(label: str) -> str:
    """A logit-lens depth label ("embeddings", "1: + MLP") in words ("layer 1's MLP")."""
    layer, colon, part = label.partition(": + ")
    return f"layer {layer}'s {part}" if colon else f"the {label}"


def logit_lens_findings(record: Record) -> list[str]:
    """Where in depth the answer appears, from inspect_logit_lens.json."""
    depths, exact = record["depths"], record["exact_match"]
    depth = answer_depth(record)
    if depth is None:
        right = round(exact[-1] * record["examples"])
        return [
            f"the model answers {right:,} of {record['examples']:,} sequences exactly right, under {JUDGED}: too few "
            "to place where the answer appears (score more examples, --examples, or train longer)"
        ]
    found = [
        f"the answer appears after {depth_name(depths[depth])}: read out there, exact match is {exact[depth]:.4f} "
        f"(at least {APPEARS_SHARE:.0%} of the model's {exact[-1]:.4f})"
    ]
    if depth > 0:
        before = max(exact[:depth])
        found.append(
            f"read out any earlier, exact match is at most {before:.4f} "
            f"(after {depth_name(depths[exact.index(before)])})"
        )
    return found


def position_cell(record: Record, layer: int, position: int) -> str:
    """A patched position and what patching it restores: "answer 0 (0.994, the position that writes answer 1)"."""
    writes = position == len(record["positions"]) - 1
    where = f", the position that writes answer {record['answer_position']}" if writes else ""
    return f"{record['positions'][position]} ({record['restored'][layer][position]:.3f}{where})"


def carrying_cells(record: Record) -> list[tuple[int, int]]:
    return [
        (layer, position)
        for layer, row in enumerate(record["restored"])
        for position, value in enumerate(row)
        if value >= CARRIES_SHARE
    ]


def patching_findings(record: Record) -> list[str]:
    """Which layer and position carry what the answer depends on, from inspect_patch_<point>.json."""
    point, positions, restored = record["point"], record["positions"], record["restored"]
    cells = carrying_cells(record)
    found = []
    for layer in range(len(restored)):
        here = [position for cell_layer, position in cells if cell_layer == layer]
        best = max(range(len(positions)), key=lambda position: restored[layer][position])
        if here:
            named = ", ".join(position_cell(record, layer, p) for p in here)
            found.append(f"{point} of layer {layer} carries the answer's difference at {named}")
        else:
            found.append(
                f"{point} of layer {layer} carries it at no single position: the most any restores is "
                f"{restored[layer][best]:.3f} ({positions[best]}; the rule is {CARRIES_SHARE:.0%})"
            )
    return found


def comparison_ratio(
    table: Sequence[Sequence[float]], counts: Sequence[Sequence[int]], values: Sequence[str]
) -> float | None:
    """A head's mean weight on prompt values at or above the value just written over that on those below (each cell
    weighted by how often it was seen); None when the values are not all digits or one side was never seen."""
    if not all(value.isdigit() for value in values):
        return None
    numbers = [int(value) for value in values]
    sums, seen = [0.0, 0.0], [0, 0]  # [at or above, below]
    for written, row in enumerate(table):
        for read, weight in enumerate(row):
            side = 0 if numbers[read] >= numbers[written] else 1
            sums[side] += weight * counts[written][read]
            seen[side] += counts[written][read]
    if not all(seen) or sums[1] == 0:
        return None
    return (sums[0] / seen[0]) / (sums[1] / seen[1])


def reads_findings(record: Record, unused: Sequence[int] = ()) -> list[str]:
    """What each head compares, from inspect_reads.json; a layer in `unused` (minor_layers) is one sentence."""
    values, counts = record["values"], record["counts"]
    found = []
    for layer, heads in enumerate(record["reads"]):
        if layer in unused:
            found.append(
                f"layer {layer}'s heads are left out: removing them all costs at most {NEEDED_COST:.0%}, so what they "
                "read hardly reaches the answer"
            )
            continue
        for head, table in enumerate(heads):
            ratio = comparison_ratio(table, counts, values)
            name = f"head {layer}.{head}"
            on_answer = f"{record['on_answer'][layer][head]:.2f} of its weight on the answer written so far"
            if ratio is None:
                found.append(f"{name}: {on_answer}")
            elif ratio >= COMPARES_RATIO:
                found.append(
                    f"{name} compares: it reads prompt values at or above the one just written {ratio:.1f}x as "
                    f"much as those below; {on_answer}"
                )
            elif ratio <= 1 / COMPARES_RATIO:
                found.append(
                    f"{name} compares: it reads prompt values below the one just written {1 / ratio:.1f}x as "
                    f"much as those at or above; {on_answer}"
                )
            else:
                found.append(f"{name} reads prompt values alike whatever was written (ratio {ratio:.1f}); {on_answer}")
    return found


def sections(records: Mapping[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """Each record's findings under its report section (heads, logit-lens, patch-<point>, reads), in that order."""
    if "heads" in records:
        yield "heads", head_findings(records["heads"])
    if "logit_lens" in records:
        yield "logit-lens", logit_lens_findings(records["logit_lens"])
    for point, record in records.get("patching", {}).items():
        yield f"patch-{point}", patching_findings(record)
    if "reads" in records:
        yield "reads", reads_findings(records["reads"], minor_layers(records["heads"]) if "heads" in records else ())


def all_findings(records: Mapping[str, Any]) -> Iterator[str]:
    """The findings of every record in `records`, section by section."""
    for _, found in sections(records):
        yield from found
