"""Reading what the trainer writes into a run directory.

A run directory holds ``config.json``, ``metrics.jsonl`` (one JSON object per
logged step) and, optionally, ``attention.npz`` (attention weights of every
layer and head on one held-out example).  Everything here turns malformed
input into a one-line :class:`~gpt_viz.errors.VizError` instead of a traceback.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Union

import numpy as np

from gpt_viz.errors import VizError

PathLike = Union[str, "os.PathLike[str]"]
Record = Mapping[str, Any]

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
ATTENTION_FILE = "attention.npz"

# Bookkeeping keys present on every line; they are axes, not metrics.
_NON_METRIC_KEYS = frozenset({"step", "elapsed"})


class AttentionSnapshot(NamedTuple):
    """Attention of every layer and head on one example.

    ``weights`` has shape ``(n_layer, n_head, T, T)`` (query × key);
    ``tokens`` holds the T token labels.
    """

    weights: np.ndarray
    tokens: list[str]


def run_directory(run_dir: PathLike) -> Path:
    """Return ``run_dir`` as a Path, failing early with a clear message if it is absent."""
    path = Path(run_dir)
    if not path.is_dir():
        raise VizError(f"run directory {path} does not exist")
    return path


def load_config(run_dir: PathLike) -> dict[str, Any]:
    """Read ``config.json``; a missing file gives ``{}`` so copied-out metrics still plot."""
    path = run_directory(run_dir) / CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise VizError(f"{path} is not valid JSON: {error.msg} (line {error.lineno})") from error
    if not isinstance(config, dict):
        raise VizError(f"{path} must hold a JSON object, not {type(config).__name__}")
    return config


def load_metrics(run_dir: PathLike) -> list[dict[str, Any]]:
    """Read ``metrics.jsonl`` into one dict per logged step, in file order.

    Blank lines are skipped (a trailing newline is normal); anything else that
    is not a JSON object with a ``"step"`` is reported with its line number.
    """
    path = run_directory(run_dir) / METRICS_FILE
    if not path.is_file():
        raise VizError(f"{path} is missing")
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [_parse_metrics_line(line, path, number) for number, line in enumerate(lines, start=1) if line.strip()]
    if not records:
        raise VizError(f"{path} is empty")
    return records


def _parse_metrics_line(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise VizError(f"{path} line {number} is not valid JSON: {error.msg}") from error
    if not isinstance(record, dict):
        raise VizError(f"{path} line {number} is not a JSON object")
    if "step" not in record:
        raise VizError(f'{path} line {number} has no "step"')
    return record


def available_metrics(records: Iterable[Record]) -> list[str]:
    """Names of every metric logged at least once, sorted (``step``/``elapsed`` excluded)."""
    names = {key for record in records for key in record}
    return sorted(names - _NON_METRIC_KEYS)


def metric_series(records: Iterable[Record], key: str, *, source: str = "the records") -> tuple[np.ndarray, np.ndarray]:
    """Return ``(steps, values)`` for the lines that carry ``key``.

    Evaluation metrics appear only on evaluation lines, so a metric series is
    usually shorter than the loss series.  ``source`` names the run in the
    error raised when no line carries ``key``.
    """
    records = list(records)
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not points:
        available = ", ".join(available_metrics(records)) or "none"
        raise VizError(f"metric {key!r} not found in {source}; it has: {available}")
    steps, values = zip(*points, strict=True)
    try:
        return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise VizError(f"metric {key!r} in {source} has a step or value that is not a number: {error}") from error


def load_attention(run_dir: PathLike) -> AttentionSnapshot:
    """Read ``attention.npz`` and check that the weights match the tokens."""
    path = run_directory(run_dir) / ATTENTION_FILE
    if not path.is_file():
        raise VizError(f"{path} is missing")
    weights, tokens = _read_npz_arrays(path, ("weights", "tokens"))
    if weights.ndim != 4:
        raise VizError(f"{path}: weights have shape {weights.shape}; expected (n_layer, n_head, T, T)")
    labels = [str(token) for token in np.asarray(tokens).astype(str).ravel()]
    check_attention_shape(weights, labels)
    return AttentionSnapshot(weights=weights, tokens=labels)


def _read_npz_arrays(path: Path, names: tuple[str, ...]) -> list[np.ndarray]:
    """The named arrays of an .npz archive; pickled (object) arrays are refused, not executed."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [name for name in names if name not in archive.files]
            if missing:
                raise VizError(f"{path} lacks the array {missing[0]!r}; it needs {', '.join(map(repr, names))}")
            return [archive[name] for name in names]
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise VizError(f"{path} is not a readable .npz of plain arrays (store tokens as strings): {error}") from error


def check_attention_shape(weights: np.ndarray, tokens: Sequence[str]) -> None:
    """Fail unless the last two axes are square (query × key) and match the token count."""
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        raise VizError(f"attention weights of shape {weights.shape} are not square (query × key)")
    positions = weights.shape[-1]
    if positions == 0 or weights.size == 0:
        raise VizError(f"attention weights of shape {weights.shape} are empty")
    if positions != len(tokens):
        raise VizError(f"attention weights cover {positions} positions but there are {len(tokens)} tokens")
