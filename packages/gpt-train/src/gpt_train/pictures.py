"""The pictures a finished run leaves behind: curves, attention maps, and the grokking plot.

Drawing belongs to gpt-viz; this module only gathers the arrays (the attention of one held-out
example) and asks for the figures. A picture that cannot be drawn is reported and skipped: it
must never cost the user the run it describes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gpt_core import GPT
from gpt_tasks import Task, evaluating

ATTENTION_NAME = "attention.npz"


def save_attention(task: Task, model: GPT, device: torch.device, run_dir: Path) -> None:
    """attention.npz: every layer's attention (n_layer, n_head, T, T) on the task's held-out example."""
    text = task.attention_example()
    ids = task.encode(text)[: model.config.block_size]
    with evaluating(model):
        _, _, attention = model(torch.tensor([ids], device=device), return_attention=True)
    weights = attention[:, 0].float().cpu().numpy()  # (L, H, T, T)
    np.savez(run_dir / ATTENTION_NAME, weights=weights, tokens=np.array(task.token_labels(ids)))


def draw_run_pictures(run_dir: Path, grokking: bool) -> list[Path]:
    """curves.png, attention.png (last layer, every head) and, for two-split tasks, grokking.png."""
    import gpt_viz

    written = gpt_viz.save_figure(gpt_viz.training_curves(run_dir), run_dir / "curves.png")
    snapshot = gpt_viz.load_attention(run_dir)
    last = snapshot.weights.shape[0] - 1
    grid = gpt_viz.attention_grid(snapshot.weights[last], snapshot.tokens, layer=last)
    written += gpt_viz.save_figure(grid, run_dir / "attention.png")
    if grokking:
        written += gpt_viz.save_figure(gpt_viz.grokking(run_dir), run_dir / "grokking.png")
    return written


def write_pictures(task: Task, model: GPT, device: torch.device, run_dir: Path) -> tuple[list[Path], str | None]:
    """Write the run's pictures; returns the files and, if drawing failed, why."""
    try:
        save_attention(task, model, device, run_dir)
        return draw_run_pictures(run_dir, grokking="train" in task.eval_splits), None
    except Exception as error:  # a picture is never worth losing the run over
        return [], f"{type(error).__name__}: {error}"
