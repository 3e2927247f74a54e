"""Fixture run directories shaped like the trainer's output, written into tmp_path."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread
from picture_checks import count_colours

from gpt_viz import SAVE_DPI, AttentionSnapshot, RunLayout, save_attention_examples, save_figure

TOKENS = ["1", "2", "+", "3", "4", "=", "4", "6", " ", "$"]
EXAMPLE_TOKENS = (TOKENS, ["9", "+", "8", "=", "1", "7", "$"], ["5", "0", "+", "5", "0", "=", "1", "0", "0", "$"])
"""The token labels of the fixture run's attention examples: the first is TOKENS, the second shorter."""
EVAL_EVERY = 50


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def training_records(last_step: int = 500) -> list[dict[str, Any]]:
    """Loss every 10 steps; evaluation metrics every 50 steps, as the trainer logs them.

    train_accuracy first reaches 0.99 at step 200, heldout_accuracy at step 400.
    """
    records = []
    for step in range(0, last_step + 1, 10):
        record = {"step": step, "elapsed": step * 0.01, "loss": 3.0 * math.exp(-step / 100) + 0.05, "lr": 3e-4}
        if step % EVAL_EVERY == 0:
            record |= {
                "heldout_exact_match": _sigmoid((step - 250) / 40),
                "heldout_loss": 2.0 * math.exp(-step / 150) + 0.1,
                "train_accuracy": _sigmoid((step - 100) / 15),
                "heldout_accuracy": _sigmoid((step - 300) / 15),
            }
        records.append(record)
    return records


def causal_attention(n_layer: int, n_head: int, length: int, seed: int = 0) -> np.ndarray:
    """Softmax of fixed random scores under a causal mask: rows sum to 1, zero above the diagonal."""
    scores = np.random.default_rng(seed).normal(size=(n_layer, n_head, length, length)) * 2
    future = np.triu(np.ones((length, length), dtype=bool), k=1)
    scores[..., future] = -np.inf
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float32)


def write_run(
    root: Path,
    name: str = "run",
    *,
    config: dict[str, Any] | None = None,
    records: list[dict[str, Any]] | None = None,
    attention: bool = True,
    n_layer: int = 2,
    n_head: int = 4,
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    if config is None:
        config = {"task": "addition", "primary_metric": "heldout_exact_match"}
    RunLayout(run).config.write_text(json.dumps(config))
    lines = [json.dumps(record) for record in (records or training_records())]
    RunLayout(run).metrics.write_text("\n".join(lines) + "\n")
    if attention:
        save_attention_examples(run, fixture_examples(n_layer, n_head))
    return run


def as_stored(weights: np.ndarray) -> np.ndarray:
    """``weights`` rounded as attention.npz stores them (float16) and read back (float32)."""
    return weights.astype(np.float16).astype(np.float32)


def fixture_examples(n_layer: int = 2, n_head: int = 4) -> list[AttentionSnapshot]:
    """The attention examples of a fixture run: each example's own causal pattern over EXAMPLE_TOKENS, rounded to
    float16 as attention.npz stores it, so that what a test writes is what it reads back."""
    return [
        AttentionSnapshot(as_stored(causal_attention(n_layer, n_head, len(tokens), seed=seed)), list(tokens))
        for seed, tokens in enumerate(EXAMPLE_TOKENS)
    ]


@pytest.fixture
def metrics() -> list[str]:
    """Every metric the fixture run logs (training_records), in name order."""
    return ["heldout_accuracy", "heldout_exact_match", "heldout_loss", "loss", "lr", "train_accuracy"]


@pytest.fixture
def tokens() -> list[str]:
    """The token labels of every fixture attention map, including a space and a '$'."""
    return list(TOKENS)


@pytest.fixture
def attention_examples() -> list[AttentionSnapshot]:
    """What the fixture run's attention.npz holds, example by example (2 layers x 4 heads)."""
    return fixture_examples()


@pytest.fixture
def layer_weights() -> np.ndarray:
    """One layer of causal attention: 4 heads over the fixture tokens, shape (4, T, T)."""
    return causal_attention(n_layer=1, n_head=4, length=len(TOKENS))[0]


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    """Factory writing a run directory under tmp_path; keyword arguments as in write_run."""
    return lambda name="run", **kwargs: write_run(tmp_path / "runs", name, **kwargs)


@pytest.fixture
def run_dir(make_run: Callable[..., Path]) -> Path:
    """A complete run: config, metrics with evaluations, and attention of 2 layers × 4 heads on 3 examples."""
    return make_run()


@pytest.fixture
def assert_real_picture(tmp_path: Path) -> Callable[[Figure], None]:
    """Check that a figure saves as a PNG of figsize × SAVE_DPI pixels that is not one flat colour."""

    def check(figure: Figure) -> None:
        (png,) = save_figure(figure, tmp_path / "pictures" / "picture.png")
        pixels = imread(png)
        width, height = figure.get_size_inches() * SAVE_DPI
        assert pixels.shape[:2] == (round(height), round(width))
        assert count_colours(pixels) > 10

    return check
