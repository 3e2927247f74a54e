"""The pictures a finished run leaves behind: curves, attention maps, and the grokking plot.

Drawing belongs to gpt-viz; this module only gathers the arrays (the attention of a few held-out
examples) and asks for the figures. A picture that cannot be drawn is reported and skipped: it
must never cost the user the run it describes.
"""

from __future__ import annotations

import torch

import gpt_viz
from gpt_core import GPT
from gpt_tasks import Task, evaluating
from gpt_viz import TRAIN, AttentionSnapshot, RunLayout

ATTENTION_EXAMPLES = 4
"""Held-out examples a run keeps the attention of: enough to choose between in `gpt-viz explore`, few enough
that the file stays small (each is n_layer x n_head x T x T numbers)."""


def save_attention(task: Task, model: GPT, device: torch.device, layout: RunLayout) -> None:
    """attention.npz: every layer's attention on each of the task's first ATTENTION_EXAMPLES attention
    examples (gpt_viz.run_data has the format)."""
    with evaluating(model):
        examples = [
            attention_on(task, model, device, text)
            for text in task.attention_examples(ATTENTION_EXAMPLES)[:ATTENTION_EXAMPLES]
        ]
    gpt_viz.save_attention_examples(layout.root, examples)


def attention_on(task: Task, model: GPT, device: torch.device, text: str) -> AttentionSnapshot:
    """Every layer's attention (n_layer, n_head, T, T) on `text`, cut to the model's block_size, and its labels."""
    ids = task.encode(text)[: model.config.block_size]
    attention = model(torch.tensor([ids], device=device), return_attention=True).attention  # (L, 1, H, T, T)
    return AttentionSnapshot(weights=attention[:, 0].float().cpu().numpy(), tokens=task.token_labels(ids))


def draw_run_pictures(layout: RunLayout, grokking_metric: str | None) -> None:
    """curves.png, attention.png (last layer, every head) and, for tasks scored on both splits, grokking.png
    (the train and held-out curves of `grokking_metric`)."""
    gpt_viz.save_figure(gpt_viz.training_curves(layout.root), layout.curves_picture)
    snapshot = gpt_viz.load_attention(layout.root)
    last = snapshot.weights.shape[0] - 1
    gpt_viz.save_figure(
        gpt_viz.attention_grid(snapshot.weights[last], snapshot.tokens, layer=last), layout.attention_picture
    )
    if grokking_metric is not None:
        gpt_viz.save_figure(gpt_viz.grokking(layout.root, metric=grokking_metric), layout.grokking_picture)


def write_pictures(task: Task, model: GPT, device: torch.device, layout: RunLayout) -> str | None:
    """Write the run's pictures; returns None, or why drawing failed."""
    try:
        save_attention(task, model, device, layout)
        draw_run_pictures(layout, task.primary_metric if TRAIN in task.eval_splits else None)
    except Exception as error:  # a picture is never worth losing the run over
        return f"{type(error).__name__}: {error}"
    return None
