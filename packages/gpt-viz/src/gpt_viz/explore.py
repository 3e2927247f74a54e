"""The explorer page: one self-contained HTML file (it opens offline and fetches nothing) with the run's curves,
every head of every layer and, once `gpt-train inspect RUN heads` has run, the head-ablation table. The data travels
as JSON with ``<``, ``>`` and ``&`` escaped, so no token text can end its script element or become markup."""

from __future__ import annotations

import base64
import html
import json
import math
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from gpt_viz.errors import VizError, file_target
from gpt_viz.files import write_atomically
from gpt_viz.inspect_pictures import most_needed_head
from gpt_viz.run_data import (
    AttentionSnapshot,
    PathLike,
    Record,
    available_metrics,
    is_prompt_length,
    is_run_file,
    load_attention_examples,
    load_config,
    load_metrics,
    read_json_object,
    run_directory,
)
from gpt_viz.run_layout import RunLayout, parse_metric_key

TEMPLATE = "explore_template.html"
MARKER = re.compile(r"__([A-Z]+)__")  # where a page template takes a part: __HEAD__, __DATA__, ...
MOST_POINTS = 2000  # of a series on the page, whose curves canvas is at most 1,100 pixels wide
# Characters that could close the data's <script> element or open markup inside it, as JSON escapes.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def explorer_page(run_dir: PathLike) -> str:
    data = page_data(run_directory(run_dir))
    return filled_page("gpt_viz", TEMPLATE, f"{data['title']} · gpt-viz explore", {"DATA": script_json(data)})


def filled_page(package: str, template: str, title: str, parts: dict[str, str]) -> str:
    """Every page the project writes: `template` of `package` with __HEAD__ (the page's start, up to its styles) and
    its other __MARKERS__ filled in one pass, so that no part's own text (a run named `x__DATA__`) becomes a marker."""
    parts = parts | {
        "HEAD": '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{html.escape(title)}</title>\n'
    }
    text = resources.files(package).joinpath(template).read_text(encoding="utf-8")
    return MARKER.sub(lambda match: parts.get(match.group(1), match.group(0)), text)


def write_explorer(run_dir: PathLike, target: PathLike | None = None) -> Path:
    """The page at `target` (".html" added to another suffix, so that no run file is written over) or in the run."""
    page = explorer_page(run_dir)
    path = file_target(target if target is not None else run_directory(run_dir) / RunLayout.EXPLORE_PAGE, "the page")
    if path.suffix.lower() not in (".html", ".htm"):
        path = path.with_name(f"{path.name}.html")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    except OSError as error:
        raise VizError(f"cannot write {path}: {error.strerror or error}") from error
    return path


def checkpoint_step(layout: RunLayout) -> int | None:
    """The step of the run's checkpoint, from its safetensors header (8 bytes of length, then JSON), which gpt-train
    rewrites as the run goes: what an inspect record is measured against, as `gpt-train serve` measures it. None
    without a readable one."""
    try:
        with layout.checkpoint.open("rb") as file:
            size = int.from_bytes(file.read(8), "little")
            header = json.loads(file.read(min(size, 100_000_000)))
        step = header["__metadata__"]["step"]  # a string of digits, as gpt-train writes it
        return int(step) if isinstance(step, str) and step.isascii() and step.isdigit() and len(step) < 19 else None
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: "[[[[..." as a header
        return None


def page_data(run: Path) -> dict[str, Any]:
    """Everything the page draws, JSON-ready. It opens on the head the ablation table finds most needed, else on the
    first layer's first (a small model often leaves its last layer unused)."""
    config = load_config(run)
    attention = _attention_examples(run)
    task = config.get("task")
    ablation = heads_ablation_data(run, attention[0].weights.shape[:2] if attention else None)
    layer, head = most_needed_head(ablation) if ablation else (0, 0)
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    name = RunLayout(run).name
    return {
        "title": f"{task} — {name}" if task else name,
        "model": {key: model[key] for key in ("n_layer", "n_head", "n_embd", "pos") if _is_setting(model.get(key))},
        "curves": curves_data(load_metrics(run), config.get("primary_metric")),
        "attention": [attention_data(snapshot) for snapshot in attention],
        "ablation": ablation,
        "open": {"layer": layer, "head": head, "by": "ablation" if ablation else "first layer"},
    }


def _is_setting(value: Any) -> bool:
    return isinstance(value, (int, float, str))


def curves_data(records: list[Record], primary_metric: str | None) -> dict[str, Any]:
    """Every summary metric's (steps, values); non-finite values become gaps (JSON has no NaN)."""
    series = {
        key: _series(records, key)
        for key in available_metrics(records)
        if not ((parsed := parse_metric_key(key)) and parsed.is_position_detail)
    }
    series = {key: points for key, points in series.items() if any(value is not None for value in points[1])}
    if "loss" not in series:
        raise VizError("metrics.jsonl has no training loss (no line carries a finite number under 'loss')")
    primary = primary_metric if primary_metric in series else None
    logged = {key: len(steps) for key, (steps, _) in series.items()}
    return {"primary": primary, "series": {key: _thinned(*points) for key, points in series.items()}, "logged": logged}


def _thinned(steps: list[int], values: list[float | None]) -> tuple[list[int], list[float | None]]:
    """At most MOST_POINTS of a series, for a page that stays small and quick to hover: of each of MOST_POINTS / 3
    runs of consecutive points, its lowest and its highest in step order, so a spike is still drawn, and its first
    gap, so a stretch of non-finite values still breaks the line; and the first and the last point."""
    n = len(steps)
    if n <= MOST_POINTS:
        return steps, values
    runs, kept = (MOST_POINTS - 2) // 3, {0, n - 1}
    for run in range(runs):
        span = range(run * n // runs, (run + 1) * n // runs)
        finite = [i for i in span if values[i] is not None]
        kept |= {min(finite, key=values.__getitem__), max(finite, key=values.__getitem__)} if finite else set()
        kept |= {next((i for i in span if values[i] is None), span[0])} if len(finite) < len(span) else set()
    order = sorted(kept)
    return [steps[i] for i in order], [values[i] for i in order]


def _series(records: list[Record], key: str) -> tuple[list[int], list[float | None]]:
    points = [(record["step"], record[key]) for record in records if record.get(key) is not None]  # load_metrics
    return [step for step, _ in points], [float(value) if math.isfinite(value) else None for _, value in points]


def _attention_examples(run: Path) -> list[AttentionSnapshot]:
    """None before the run writes its attention file at its end."""
    return load_attention_examples(run) if is_run_file(RunLayout(run).attention) else []


def attention_data(snapshot: AttentionSnapshot) -> dict[str, Any]:
    """One example, its weights as base64 bytes, each a fraction 0..255 of its row's largest (the row maxima as base64
    float32): a quarter of float32's size, and a diffuse row as finely resolved as a sharp one (within 0.002)."""
    weights = np.asarray(snapshot.weights, dtype=np.float64)  # (L, H, T, T)
    row_max = weights.max(axis=-1)  # (L, H, T)
    scale = np.where(row_max > 0, row_max, 1.0)[..., None]
    levels = np.rint(weights / scale * 255).astype(np.uint8)
    prompt = snapshot.prompt_length  # the page draws the prompt/answer line only at a prompt's token count
    return {
        "tokens": list(snapshot.tokens),
        "prompt_length": int(prompt) if is_prompt_length(prompt, len(snapshot.tokens)) else None,
        "shape": list(weights.shape),
        "weights": base64.b64encode(levels.tobytes()).decode("ascii"),
        "row_max": base64.b64encode(row_max.astype("<f4").tobytes()).decode("ascii"),
    }


def heads_ablation_data(run: Path, heads: tuple[int, int] | None) -> dict[str, Any] | None:
    """The head-ablation table if written, checked against ``heads`` (the attention file's n_layer, n_head) so a table
    from another model is refused, not drawn."""
    layout = RunLayout(run)
    path = layout.heads_ablation
    if not is_run_file(path):
        return None
    table = read_json_object(path)
    if not isinstance(table.get("metric"), str):
        raise VizError(f'{path} needs "metric", the name of the metric it scores')
    baseline = table.get("baseline")
    if not _is_number(baseline):
        raise VizError(f'{path} needs "baseline", the metric with no head ablated, as a finite number')
    grids = {kind: _layer_by_head(table.get(kind), path, kind) for kind in ("zero", "mean")}
    shapes = {kind: (len(grid), len(grid[0])) for kind, grid in grids.items()}
    if shapes["zero"] != shapes["mean"]:
        raise VizError(f'{path}: "zero" is {shapes["zero"]} layers x heads but "mean" is {shapes["mean"]}')
    if heads is not None and shapes["zero"] != tuple(heads):
        raise VizError(f"{path} covers {shapes['zero']} layers x heads but the attention file has {tuple(heads)}")
    examples = table.get("examples")
    latest = checkpoint_step(layout)
    return {
        "metric": table["metric"],
        "split": str(table.get("split", "")),
        "examples": examples if _is_number(examples) else None,
        "baseline": float(baseline),
        "step": table.get("step") if _is_step(table.get("step")) else None,
        "higher_is_better": table.get("higher_is_better") is not False,
        **grids,
        "checkpoint_step": latest,
    }


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _layer_by_head(grid: Any, path: Path, kind: str) -> list[list[float]]:
    rows_ok = isinstance(grid, list) and grid and all(isinstance(row, list) and row for row in grid)
    if not rows_ok or len({len(row) for row in grid}) != 1 or not all(_is_number(v) for row in grid for v in row):
        raise VizError(f'{path}: "{kind}" must be a list per layer of one finite number per head')
    return [[float(value) for value in row] for row in grid]


def _is_number(value: Any) -> bool:
    """A finite number a float64 holds (JSON's integers have no bound: math.isfinite overflows on a larger one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= sys.float_info.max
    return isinstance(value, float) and math.isfinite(value)


def script_json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).translate(_SCRIPT_SAFE)
