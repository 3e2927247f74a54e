"""Reading what the trainer writes into a run directory, and writing ``attention.npz`` beside its reader (its format:
the run directory table of packages/gpt-viz/README.md); malformed input is a one-line VizError naming the file."""

from __future__ import annotations

import json
import math
import os
import sys
import tokenize
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Union

import numpy as np

from gpt_viz.errors import VizError
from gpt_viz.files import write_atomically
from gpt_viz.run_layout import AXIS_KEYS, RunLayout

PathLike = Union[str, "os.PathLike[str]"]
Record = Mapping[str, Any]

# How damaged archive bytes fail: numpy parses a garbled .npy header with ast and tokenize, a garbled shape may ask
# for terabytes, and zipfile meets a flipped flag as a RuntimeError.
_DAMAGED_ARCHIVE = (OSError, RuntimeError, ValueError, EOFError, SyntaxError, MemoryError, tokenize.TokenError,
                    zipfile.BadZipFile, zlib.error)  # fmt: skip
_ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")  # how an .npz (a zip, possibly empty) starts

ATTENTION_BUDGET = 4 * 2**20
"""Most weights, padding included, one attention.npz holds: 8 MiB as float16, whatever the model."""


class AttentionSnapshot(NamedTuple):
    """Attention of every layer and head on one example: ``weights`` (n_layer, n_head, T, T), query × key, the T
    ``tokens``, and how many of them are the prompt when the example is a prompt then its answer (else None)."""

    weights: np.ndarray
    tokens: list[str]
    prompt_length: int | None = None


def is_prompt_length(value: Any, positions: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 1 <= value <= positions


def run_directory(run_dir: PathLike) -> Path:
    path = Path(run_dir)
    if not path.is_dir():
        raise VizError(f"run directory {path} does not exist")
    return path


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise VizError(f"cannot read {path}: {error.strerror or error}") from error
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise VizError(f"{path} is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line})") from error


def is_run_file(path: Path) -> bool:
    """Whether a run's file is there: False where nothing is; a one-line VizError where something else is (a
    directory named like it), which would otherwise read as the file missing."""
    if path.is_file():
        return True
    if path.exists():
        raise VizError(f"{path} is a directory, not a file" if path.is_dir() else f"{path} is not a regular file")
    return False


def load_config(run_dir: PathLike) -> dict[str, Any]:
    """Read ``config.json``; a missing file gives ``{}`` so copied-out metrics still plot."""
    path = RunLayout(run_directory(run_dir)).config
    return read_json_object(path) if is_run_file(path) else {}


def read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise VizError(f"{path} is not valid JSON: {error.msg} (line {error.lineno})") from error
    except (ValueError, RecursionError) as error:  # an integer of over 4,300 digits; nesting deeper than the stack
        raise VizError(f"{path} is not JSON Python reads ({_first_words(error)})") from None
    if not isinstance(value, dict):
        raise VizError(f"{path} must hold a JSON object, not {type(value).__name__}")
    return value


def _first_words(error: Exception) -> str:
    return " ".join(str(error).split()[:12]) or type(error).__name__


def load_metrics(run_dir: PathLike) -> list[dict[str, Any]]:
    """One dict per logged step, in step order, every value a number (NaN or null: not finite); blank lines
    skipped, and an unfinished last line (no newline yet: a run writing it, or killed while it did) too.
    (`gpt-train run --resume` drops a damaged last line, newline or not.)"""
    path = RunLayout(run_directory(run_dir)).metrics
    if not is_run_file(path):
        raise VizError(f"{path} is missing")
    records = []
    text = read_text(path)
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise VizError(f"{path} line {number} is not valid JSON: {error.msg}") from error
        except (ValueError, RecursionError) as error:  # as in read_json_object
            raise VizError(f"{path} line {number} is not JSON Python reads ({_first_words(error)})") from None
        if not isinstance(record, dict):
            raise VizError(f"{path} line {number} is not a JSON object")
        if "step" not in record:
            raise VizError(f'{path} line {number} has no "step"')
        for key, value in record.items():  # every picture and the explorer read the same checked numbers
            if (wrong := _not_logged(value, whole=key == "step")) is not None:
                shown = json.dumps(value)
                shown = shown if len(shown) <= 40 else f"{shown[:24]}... ({len(shown):,} characters)"
                raise VizError(f"{path} line {number}: {key} is {shown}, {wrong}")
        if records and record["step"] < records[-1]["step"]:
            raise VizError(f"{path} line {number}: step {record['step']} comes after step {records[-1]['step']}")
        records.append(record)
    if not records:
        raise VizError(f"{path} is empty")
    return records


def _not_logged(value: Any, whole: bool) -> str | None:
    """What is wrong with a logged value (None: nothing): a number (not a bool) a float64 holds, null for a metric
    that was not finite, and a whole number an int64 holds as a step (JSON's integers have no bound; a larger one
    failed in NumPy, a traceback)."""
    kind = "an integer" if whole else "a number"
    if value is None or isinstance(value, bool):
        return None if value is None and not whole else f"not {kind}"
    if isinstance(value, int):
        fits = -(2**63) <= value < 2**63 if whole else abs(value) <= sys.float_info.max
        return None if fits else f"more than {'an int64' if whole else 'a float64'} holds"
    return None if isinstance(value, float) and not whole else f"not {kind}"


def available_metrics(records: Iterable[Record]) -> list[str]:
    """The metrics some record holds a number of (null at every step: none)."""
    names = {key for record in records for key, value in record.items() if value is not None}
    return sorted(names - AXIS_KEYS)


def metric_series(records: Iterable[Record], key: str, *, source: str = "the records") -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of the lines that carry ``key``; ``source`` names the run in the error when none does."""
    records = list(records)
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not points:
        available = ", ".join(available_metrics(records)) or "none"
        raise VizError(f"metric {key!r} not found in {source}; it has: {available}")
    steps, values = zip(*points, strict=True)
    try:
        steps, values = np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        raise VizError(f"metric {key!r} in {source} has a step or value that is not a number: {error}") from error
    if not np.isfinite(values).any():  # a picture of it is empty
        raise VizError(f"metric {key!r} in {source} is not finite at any of its {len(values)} steps (nan or inf)")
    return steps, values


THRESHOLD = 0.99
"""Where an accuracy counts as reached: the grokking picture's line, and t_fit and t_gen's."""


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float = THRESHOLD) -> int | None:
    reached = np.flatnonzero(values >= threshold)
    return int(steps[reached[0]]) if reached.size else None


def collapses(steps: np.ndarray, values: np.ndarray, threshold: float = THRESHOLD) -> list[tuple[int, int | None]]:
    """Each (first step below, first step back at or above it or None) after the series first reaches
    ``threshold``: grokking's slingshot (Thilak et al. 2022), where a run that stops inside one ends ungeneralised."""
    spans: list[tuple[int, int | None]] = []
    above = values >= threshold
    if not above.any():
        return spans
    start = None
    for i in range(int(np.flatnonzero(above)[0]), len(values)):
        if not above[i] and start is None:
            start = int(steps[i])
        elif above[i] and start is not None:
            spans.append((start, int(steps[i])))
            start = None
    if start is not None:
        spans.append((start, None))
    return spans


def load_attention(run_dir: PathLike) -> AttentionSnapshot:
    return load_attention_examples(run_dir)[0]


def load_attention_examples(run_dir: PathLike) -> list[AttentionSnapshot]:
    """Every example, each cut to its own length; weights that are not finite, or negative, are refused."""
    path = RunLayout(run_directory(run_dir)).attention
    if not is_run_file(path):
        raise VizError(f"{path} is missing")
    arrays = _read_npz_arrays(path, ("weights", "tokens"), optional=("lengths", "prompt_lengths"))
    tokens = arrays["tokens"]
    try:
        weights = arrays["weights"].astype(np.float32)
    except (TypeError, ValueError) as error:
        raise VizError(f"{path}: weights are not numbers ({arrays['weights'].dtype})") from error
    if weights.ndim != 5 or weights.shape[-1] != weights.shape[-2]:
        raise VizError(f"{path}: weights have shape {weights.shape}; expected (examples, n_layer, n_head, T, T)")
    lengths, prompts = arrays.get("lengths"), arrays.get("prompt_lengths")
    if lengths is None:
        raise VizError(f"{path} lacks the array 'lengths', which weights of five axes need")
    if len(weights) == 0:
        raise VizError(f"{path} holds no examples")
    if not _whole_numbers(lengths, 1, weights.shape[-1], weights.shape[:1]):
        raise VizError(
            f"{path}: lengths must be one whole number from 1 to {weights.shape[-1]} per example, "
            f"got {lengths.tolist()}"
        )
    expected = (len(weights), weights.shape[-1])
    if tokens.shape != expected:
        raise VizError(f"{path}: tokens have shape {tokens.shape}; expected {expected}, one row per example")
    if prompts is None:
        prompts = np.zeros_like(lengths)
    elif not _whole_numbers(prompts, 0, lengths, lengths.shape):
        raise VizError(
            f"{path}: prompt_lengths must be one whole number from 0 to its example's length per example, "
            f"got {prompts.tolist()}"
        )
    examples = [
        _checked_snapshot(example[:, :, :length, :length], labels[:length], prompt or None)
        for example, labels, length, prompt in zip(weights, tokens, lengths.tolist(), prompts.tolist(), strict=True)
    ]
    # Here, so that every reader refuses them alike: a picture's colour scale runs from 0 to the largest weight.
    if not all(np.all(np.isfinite(example.weights)) for example in examples):
        raise VizError(f"{path}: weights hold NaN or infinite values")
    if any(np.any(example.weights < 0) for example in examples):
        raise VizError(f"{path}: weights hold negative values; attention weights are probabilities")
    return examples


def _whole_numbers(values: np.ndarray, low: int | np.ndarray, high: int | np.ndarray, shape: tuple) -> bool:
    return values.shape == shape and values.dtype.kind in "iu" and bool(np.all((values >= low) & (values <= high)))


def _checked_snapshot(weights: np.ndarray, tokens: np.ndarray, prompt_length: int | None = None) -> AttentionSnapshot:
    labels = [str(token) for token in tokens.astype(str)]
    check_attention_shape(weights, labels)
    return AttentionSnapshot(weights=weights, tokens=labels, prompt_length=prompt_length)


def attention_lengths_within_budget(lengths: Sequence[int], n_layer: int, n_head: int) -> list[int]:
    """How many tokens to keep of each of the first examples while their padded attention fits the budget: the first
    cut to what fits if it must (a run always has a picture), every other kept whole or left out."""
    heads, budget = n_layer * n_head, ATTENTION_BUDGET
    kept: list[int] = []
    for length in lengths:
        if not kept:
            kept.append(min(length, max(1, math.isqrt(budget // heads))))
        elif (len(kept) + 1) * heads * max(*kept, length) ** 2 <= budget:
            kept.append(length)
        else:
            break
    return kept


def save_attention_examples(run_dir: PathLike, examples: Sequence[AttentionSnapshot]) -> Path:
    """Write ``attention.npz``; more than ATTENTION_BUDGET weights are refused (attention_lengths_within_budget)."""
    if not examples:
        raise VizError("no attention examples to save")
    for example in examples:
        if example.weights.ndim != 4:
            raise VizError(f"attention weights of shape {example.weights.shape} are not (n_layer, n_head, T, T)")
        check_attention_shape(example.weights, example.tokens)
        prompt = example.prompt_length
        if prompt is not None and not is_prompt_length(prompt, len(example.tokens)):
            raise VizError(f"prompt length {prompt!r} is not a whole number from 1 to the {len(example.tokens)} tokens")
    heads = {example.weights.shape[:2] for example in examples}
    if len(heads) != 1:
        raise VizError(f"attention examples disagree on (n_layer, n_head): {sorted(heads)}")
    lengths = np.array([len(example.tokens) for example in examples], dtype=np.int64)
    longest = int(lengths.max())
    shape = (len(examples), *heads.pop(), longest, longest)  # (N, L, H, T, T)
    if math.prod(shape) > ATTENTION_BUDGET:
        raise VizError(f"attention examples of shape {shape} exceed the file's budget of {ATTENTION_BUDGET:,} weights")
    weights = np.zeros(shape, dtype=np.float16)
    for padded, example, length in zip(weights, examples, lengths, strict=True):
        padded[:, :, :length, :length] = example.weights
    tokens = np.array(
        [list(example.tokens) + [""] * (longest - len(example.tokens)) for example in examples], dtype=str
    )
    prompts = np.array([example.prompt_length or 0 for example in examples], dtype=np.int64)
    path = RunLayout(run_directory(run_dir)).attention

    def write(tmp: Path) -> None:
        with tmp.open("wb") as file:  # a file, not a name: numpy would add ".npz" to the temporary's
            np.savez_compressed(file, weights=weights, tokens=tokens, lengths=lengths, prompt_lengths=prompts)

    write_atomically(path, write)
    return path


def _read_npz_arrays(path: Path, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The named arrays and those of ``optional`` present, pickles refused. A file not starting like a zip is refused
    up front: ``np.load`` would call random bytes "pickled data" and an empty file EOF."""
    try:
        with path.open("rb") as file:
            start = file.read(4)
    except OSError as error:
        raise VizError(f"cannot read {path}: {error.strerror or error}") from error
    if start not in _ZIP_STARTS:
        raise VizError(f"{path} is not a readable .npz archive (not a zip of numpy arrays)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            members = set(archive.zip.namelist())
            missing = [name for name in names if f"{name}.npy" not in members]
            if missing:
                raise VizError(f"{path} lacks the array {missing[0]!r}; it needs {', '.join(map(repr, names))}")
            present = names + tuple(name for name in optional if f"{name}.npy" in members)
            pickled = [name for name in present if _stored_dtype(archive, name).hasobject]
            if pickled:
                raise VizError(
                    f"{path} stores {pickled[0]!r} as pickled Python objects, which gpt-viz never loads; "
                    "store tokens as strings"
                )
            return {name: archive[name] for name in present}
    except _DAMAGED_ARCHIVE as error:
        raise VizError(f"{path} is not a readable .npz archive: {error}") from error


def _stored_dtype(archive: Any, name: str) -> np.dtype:
    with archive.zip.open(f"{name}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = read_header(member)
    return dtype


def check_attention_shape(weights: np.ndarray, tokens: Sequence[str]) -> None:
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2]:
        raise VizError(f"attention weights of shape {weights.shape} are not square (query × key)")
    positions = weights.shape[-1]
    if positions == 0 or weights.size == 0:
        raise VizError(f"attention weights of shape {weights.shape} are empty")
    if positions != len(tokens):
        raise VizError(f"attention weights cover {positions} positions but there are {len(tokens)} tokens")
