"""The inspect records a run holds, read back for the explorer: a JSON file anyone can edit, so each field the
explorer and the findings read is checked (finite numbers, not bools; grids of the model's shape) and only those are
kept; a record failing any check is left out as if never written."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpt_core import GPTConfig


class Unusable(Exception):
    """A field of a record of the wrong type, not finite, or of the wrong shape (a missing one is a KeyError)."""


def number(value: Any) -> float:
    """A finite int or float (not a bool), as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unusable
    try:
        value = float(value)
    except OverflowError:  # an int past any float
        raise Unusable from None
    if not math.isfinite(value):
        raise Unusable
    return value


def count(value: Any) -> int:
    """A whole number, zero or more (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unusable
    return value


def of_type(kind: type) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise Unusable
        return value

    return check


text, flag, mapping = of_type(str), of_type(bool), of_type(dict)


def listed(value: Any, item: Callable[[Any], Any], length: int | None = None) -> list[Any]:
    """A list of `length` items (any length, at least one, when None), each checked by `item`."""
    if not isinstance(value, list) or (len(value) != length if length is not None else not value):
        raise Unusable
    return [item(entry) for entry in value]


def grid(value: Any, rows: int | None, columns: int | None, item: Callable[[Any], Any] = number) -> list[Any]:
    """Rows of numbers (or of what `item` checks), `rows` by `columns`; rows of one length when `columns` is None."""
    found = listed(value, lambda row: listed(row, item, columns), rows)
    if len({len(row) for row in found}) != 1:
        raise Unusable
    return found


def heads(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_heads.json: one row per layer, one column per head, with whole layers ablated (`layer_zero`)."""
    return {
        "metric": text(record["metric"]),
        "examples": count(record["examples"]),
        "baseline": number(record["baseline"]),
        "zero": grid(record["zero"], model.n_layer, model.n_head),
        "mean": grid(record["mean"], model.n_layer, model.n_head),
        "layer_zero": listed(record["layer_zero"], number, model.n_layer),
        "higher_is_better": flag(record.get("higher_is_better", True)),
    }


def logit_lens(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_logit_lens.json: the embeddings then each layer's attention and MLP, by answer position."""
    depths = listed(record["depths"], text, 1 + 2 * model.n_layer)
    positions = listed(record["answer_positions"], text)
    return {
        "examples": count(record["examples"]),
        "depths": depths,
        "answer_positions": positions,
        "exact_match": listed(record["exact_match"], number, len(depths)),
        "loss": listed(record["loss"], number, len(depths)),
        "accuracy": grid(record["accuracy"], len(depths), len(positions)),
    }


def patching(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_patch_<point>.json: one row per layer, one column per patched position."""
    positions = listed(record["positions"], text)
    example = mapping(record["example"])
    return {
        "point": text(record["point"]),
        "examples": count(record["examples"]),
        "answer_position": count(record["answer_position"]),
        "positions": positions,
        "restored": grid(record["restored"], model.n_layer, len(positions)),
        "example": {"clean": text(example["clean"]), "corrupted": text(example["corrupted"])},
    }


def reads(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_reads.json: for each layer and head, a table by the value written and the value read."""
    values = listed(record["values"], text)
    table = lambda value: grid(value, len(values), len(values))
    return {
        "values": values,
        "counts": grid(record["counts"], len(values), len(values), count),
        "reads": listed(record["reads"], lambda heads: listed(heads, table, model.n_head), model.n_layer),
        "on_answer": grid(record["on_answer"], model.n_layer, model.n_head),
    }
