"""The pictures a finished run leaves (curves, attention, grokking), drawn by gpt-viz from the arrays gathered here;
one that cannot be drawn is reported, never costing the run."""

from __future__ import annotations

import torch

import gpt_viz
from gpt_core import GPT, block_hook
from gpt_tasks import PromptAnswerTask, Task, evaluating
from gpt_viz import TRAIN, AttentionSnapshot, RunLayout

ATTENTION_EXAMPLES = 4  # examples whose attention a run keeps, at most (gpt_viz.ATTENTION_BUDGET caps the file)


def save_attention(task: Task, model: GPT, device: torch.device, layout: RunLayout) -> None:
    """attention.npz: every layer's attention on as many of the task's attention examples as the file's budget
    holds (a first example too long keeps its last tokens), chosen before the model runs."""
    texts = task.attention_examples(ATTENTION_EXAMPLES)[:ATTENTION_EXAMPLES]
    encoded = [task.encode(text)[: model.config.block_size] for text in texts]
    kept = gpt_viz.attention_lengths_within_budget(
        [len(ids) for ids in encoded], model.config.n_layer, model.config.n_head
    )
    with evaluating(model):
        examples = [
            attention_on(task, model, device, ids[len(ids) - length :], prompt_tokens(task, len(ids) - length, length))
            for ids, length in zip(encoded[: len(kept)], kept, strict=True)
        ]
    gpt_viz.save_attention_examples(layout.root, examples)


def attention_on(
    task: Task, model: GPT, device: torch.device, ids: list[int], prompt_length: int | None = None
) -> AttentionSnapshot:
    """Every layer's attention (n_layer, n_head, T, T) on `ids`, their labels, and how many are the prompt."""
    names = [block_hook(layer, "pattern") for layer in range(model.config.n_layer)]
    _, cache = model.run_with_cache(torch.tensor([ids], device=device), names=names)
    attention = torch.stack([cache[name][0] for name in names])  # (L, H, T, T)
    weights = attention.float().cpu().numpy()
    return AttentionSnapshot(weights=weights, tokens=task.token_labels(ids), prompt_length=prompt_length)


def prompt_tokens(task: Task, dropped: int, kept: int) -> int | None:
    """How many of an example's `kept` tokens, after `dropped`, are its prompt (None: none, or no prompts)."""
    if not isinstance(task, PromptAnswerTask):
        return None
    left = min(task.prompt_length - dropped, kept)
    return left if left >= 1 else None


def draw_attention_picture(layout: RunLayout, layer: int = 0) -> None:
    """attention.png: every head of `layer` (the first, until head ablation says which layer matters most)."""
    snapshot = gpt_viz.load_attention(layout.root)
    layer = min(layer, snapshot.weights.shape[0] - 1)
    prompt = snapshot.prompt_length
    figure = gpt_viz.attention_grid(snapshot.weights[layer], snapshot.tokens, layer=layer, prompt_length=prompt)
    gpt_viz.save_figure(figure, layout.attention_picture)


def write_attention(task: Task, model: GPT, device: torch.device, layout: RunLayout) -> str | None:
    """The run's attention arrays, written before final.json (a finished run has them); None, or why that failed."""
    try:
        save_attention(task, model, device, layout)
    except Exception as error:  # never worth losing the run over
        return f"{type(error).__name__}: {error}"
    return None


def draw_pictures(task: Task, layout: RunLayout) -> str | None:
    """The run's pictures, from its files; None, or why that failed (Ctrl-C included: the run has finished)."""
    try:
        gpt_viz.save_figure(gpt_viz.training_curves(layout.root), layout.curves_picture)
        draw_attention_picture(layout)
        if TRAIN in task.eval_splits:
            gpt_viz.save_figure(gpt_viz.grokking(layout.root, metric=task.primary_metric), layout.grokking_picture)
    except KeyboardInterrupt:
        return f"Ctrl-C; draw them with `gpt-viz curves {layout.root}` and `gpt-viz attention {layout.root}`"
    except Exception as error:  # a picture is never worth losing the run over
        return f"{type(error).__name__}: {error}"
    return None
