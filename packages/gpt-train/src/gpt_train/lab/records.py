"""The inspect records a run holds, read back for the explorer: each checked field by field against the model it
describes, and kept only as the fields the explorer and the findings read.

A record is a JSON file anyone can edit, so nothing in it is trusted: every number must be a finite int or float
(not a bool, not NaN or infinity, which Python's json reads and strict JSON cannot carry), every text a string,
every grid of the model's shape (its layers, heads and depths) with rows of one length. A record that fails any
check is one `usable` returns None for, and the explorer leaves it out, as if it had never been written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpt_core import GPTConfig


class Unusable(Exception):
    """A field of a record that is missing, of the wrong type, not finite, or of the wrong shape."""


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


text, flag = of_type(str), of_type(bool)


def listed(value: Any, item: Callable[[Any], Any], length: int | None = None) -> list[Any]:
    """A list of `length` items (any length, at least one, when None), each checked by `item`."""
    if not isinstance(value, list) or (len(value) != length if length is not None else not value):
        raise Unusable
    return [item(entry) for entry in value]


def numbers(length: int | None = None) -> Callable[[Any], list[float]]:
    return lambda value: listed(value, number, length)


def grid(rows: int | None, columns: int | None, item: Callable[[Any], Any] = number) -> Callable[[Any], list[Any]]:
    """Rows of numbers (or of what `item` checks), `rows` by `columns`; rows of one length when `columns` is None."""

    def check(value: Any) -> list[Any]:
        found = listed(value, lambda row: listed(row, item, columns), rows)
        if len({len(row) for row in found}) != 1:
            raise Unusable
        return found

    return check


def field(record: dict[str, Any], key: str, check: Callable[[Any], Any]) -> Any:
    if key not in record:
        raise Unusable
    return check(record[key])


def heads(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_heads.json: one row per layer, one column per head, with whole layers ablated (`layer_zero`)."""
    shape = grid(model.n_layer, model.n_head)
    return {
        "metric": field(record, "metric", text),
        "examples": field(record, "examples", count),
        "baseline": field(record, "baseline", number),
        "zero": field(record, "zero", shape),
        "mean": field(record, "mean", shape),
        "layer_zero": field(record, "layer_zero", numbers(model.n_layer)),
        "higher_is_better": flag(record.get("higher_is_better", True)),
    }


def logit_lens(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_logit_lens.json: the embeddings then each layer's attention and MLP, by answer position."""
    depths = field(record, "depths", lambda value: listed(value, text, 1 + 2 * model.n_layer))
    positions = field(record, "answer_positions", lambda value: listed(value, text))
    return {
        "examples": field(record, "examples", count),
        "depths": depths,
        "answer_positions": positions,
        "exact_match": field(record, "exact_match", numbers(len(depths))),
        "loss": field(record, "loss", numbers(len(depths))),
        "accuracy": field(record, "accuracy", grid(len(depths), len(positions))),
    }


def patching(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_patch_<point>.json: one row per layer, one column per patched position."""
    positions = field(record, "positions", lambda value: listed(value, text))
    example = field(record, "example", lambda value: value if isinstance(value, dict) else {})
    return {
        "point": field(record, "point", text),
        "examples": field(record, "examples", count),
        "answer_position": field(record, "answer_position", count),
        "positions": positions,
        "restored": field(record, "restored", grid(model.n_layer, len(positions))),
        "example": {"clean": field(example, "clean", text), "corrupted": field(example, "corrupted", text)},
    }


def reads(record: dict[str, Any], model: GPTConfig) -> dict[str, Any]:
    """inspect_reads.json: for each layer and head, a table by the value written and the value read."""
    values = field(record, "values", lambda value: listed(value, text))
    table = grid(len(values), len(values))
    return {
        "values": values,
        "counts": field(record, "counts", grid(len(values), len(values), count)),
        "reads": field(
            record,
            "reads",
            lambda value: listed(value, lambda heads: listed(heads, table, model.n_head), model.n_layer),
        ),
        "on_answer": field(record, "on_answer", grid(model.n_layer, model.n_head)),
    }


def usable(
    record: Any, check: Callable[[dict[str, Any], GPTConfig], dict[str, Any]], model: GPTConfig
) -> dict[str, Any] | None:
    """The fields of `record` that `check` reads, checked against `model`; None where any is unusable."""
    if not isinstance(record, dict):
        return None
    try:
        return check(record, model)
    except Unusable:
        return None
