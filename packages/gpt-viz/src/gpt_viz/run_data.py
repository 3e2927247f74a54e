"""Reading what the trainer writes into a run directory.

A run directory holds ``config.json``, ``metrics.jsonl`` (one JSON object per
logged step) and, optionally, ``attention.npz`` (attention weights of every
layer and head on one held-out example); :mod:`gpt_viz.run_layout` owns those
names.  Everything here turns malformed input (unreadable, not UTF-8, not JSON,
not an archive) into a one-line :class:`~gpt_viz.errors.VizError` naming the
file instead of a traceback.
"""

from __future__ import annotations

import json
import os
import tokenize
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Union

import numpy as np

from gpt_viz.errors import VizError
from gpt_viz.run_layout import AXIS_KEYS, RunLayout

PathLike = Union[str, "os.PathLike[str]"]
Record = Mapping[str, Any]

# Reading an archive member can fail in any of these ways when the bytes are damaged (numpy parses a
# garbled .npy header with ast and tokenize, whose errors it lets through; a garbled shape may ask for terabytes;
# zipfile meets a flipped flag as encryption or a feature it does not implement, both RuntimeErrors).
_DAMAGED_ARCHIVE = (
    OSError,
    RuntimeError,
    ValueError,
    EOFError,
    SyntaxError,
    MemoryError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    zlib.error,
)
# The first bytes by which np.load tells an .npz (a zip, possibly empty) from a pickle or a bare .npy.
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")


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


def read_text(path: Path) -> str:
    """The file's text; unreadable or non-UTF-8 bytes become one line naming the file, not a traceback."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise VizError(f"cannot read {path}: {error.strerror or error}") from error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise VizError(f"{path} is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line})") from error


def load_config(run_dir: PathLike) -> dict[str, Any]:
    """Read ``config.json``; a missing file gives ``{}`` so copied-out metrics still plot."""
    path = RunLayout(run_directory(run_dir)).config
    if not path.is_file():
        return {}
    try:
        config = json.loads(read_text(path))
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
    path = RunLayout(run_directory(run_dir)).metrics
    if not path.is_file():
        raise VizError(f"{path} is missing")
    lines = read_text(path).splitlines()
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
    return sorted(names - AXIS_KEYS)


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
    path = RunLayout(run_directory(run_dir)).attention
    if not path.is_file():
        raise VizError(f"{path} is missing")
    weights, tokens = _read_npz_arrays(path, ("weights", "tokens"))
    if weights.ndim != 4:
        raise VizError(f"{path}: weights have shape {weights.shape}; expected (n_layer, n_head, T, T)")
    labels = [str(token) for token in np.asarray(tokens).astype(str).ravel()]
    check_attention_shape(weights, labels)
    return AttentionSnapshot(weights=weights, tokens=labels)


def _read_npz_arrays(path: Path, names: tuple[str, ...]) -> list[np.ndarray]:
    """The named arrays of an .npz archive; pickled (object) arrays are refused, not executed.

    Anything that is not a zip archive is said to be so up front: left to ``np.load``, random bytes
    or text would be "pickled data", a bare .npy an array without a context manager, an empty file EOF.
    """
    if not _starts_like_a_zip(path):
        raise VizError(f"{path} is not a readable .npz archive (not a zip of numpy arrays)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            _check_members(archive, path, names)
            return [archive[name] for name in names]
    except _DAMAGED_ARCHIVE as error:
        raise VizError(f"{path} is not a readable .npz archive: {error}") from error


def _starts_like_a_zip(path: Path) -> bool:
    """Whether np.load would open the file as a zip, judged by the same first four bytes it reads."""
    try:
        with path.open("rb") as file:
            start = file.read(4)
    except OSError as error:
        raise VizError(f"cannot read {path}: {error.strerror or error}") from error
    return start in _ZIP_STARTS


def _check_members(archive: Any, path: Path, names: tuple[str, ...]) -> None:
    """Fail unless each name is a stored .npy array of plain values: object arrays would need unpickling."""
    members = set(archive.zip.namelist())
    missing = [name for name in names if f"{name}.npy" not in members]
    if missing:
        raise VizError(f"{path} lacks the array {missing[0]!r}; it needs {', '.join(map(repr, names))}")
    pickled = [name for name in names if _stored_dtype(archive, name).hasobject]
    if pickled:
        raise VizError(
            f"{path} stores {pickled[0]!r} as pickled Python objects, which gpt-viz never loads; "
            "store tokens as strings"
        )


def _stored_dtype(archive: Any, name: str) -> np.dtype:
    """The dtype in a member's .npy header, read without loading (or unpickling) the data."""
    with archive.zip.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(member)
    return dtype


def check_attention_shape(weights: np.ndarray, tokens: Sequence[str]) -> None:
    """Fail unless the last two axes are square (query × key) and match the token count."""
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        raise VizError(f"attention weights of shape {weights.shape} are not square (query × key)")
    positions = weights.shape[-1]
    if positions == 0 or weights.size == 0:
        raise VizError(f"attention weights of shape {weights.shape} are empty")
    if positions != len(tokens):
        raise VizError(f"attention weights cover {positions} positions but there are {len(tokens)} tokens")
