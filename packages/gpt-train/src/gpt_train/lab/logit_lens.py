"""The logit lens: the residual stream after each layer's attention and MLP read out through the final LayerNorm
and the head, asking what the model would answer if it stopped there. Scored teacher-forced on held-out sequences,
which for greedy decoding is the same as generating: each step reads the same right prefix."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT, block_hook, log_softmax
from gpt_tasks import PromptAnswerTask, Task, evaluating
from gpt_train.lab.common import Record, position_ids, prompt_answer_task, seeded
from gpt_viz import HELDOUT

CHUNK = 1024  # sequences per forward pass


@dataclass(frozen=True)
class LogitLens(Record):
    """Per depth (the embeddings, then each layer's attention and MLP added): exact match, loss, and the accuracy and
    loss at each answer position; `to_json` is inspect_logit_lens.json."""

    examples: int
    depths: list[str]
    answer_positions: list[str]
    exact_match: list[float]
    loss: list[float]
    accuracy: list[list[float]]  # [depth][answer position]
    position_loss: list[list[float]]  # [depth][answer position]
    split: str = HELDOUT


def depths(model: GPT) -> dict[str, str]:
    """The residual stream entering layer 0, then in each layer after its attention and after its MLP: each hook
    name and its label."""
    names = {block_hook(0, "resid_pre"): "embeddings"}
    for layer in range(model.config.n_layer):
        names[block_hook(layer, "resid_mid")] = f"{layer}: + attention"
        names[block_hook(layer, "resid_post")] = f"{layer}: + MLP"
    return names


def decode(model: GPT, residual: Tensor) -> Tensor:
    return model.lm_head(model.ln_f(residual))


def answer_sequences(task: PromptAnswerTask, examples: int) -> Tensor:
    """The task's fixed held-out sample, the one its evaluation scores, as whole sequences (N, T)."""
    return task.sequences(task.split.evaluation_ids(HELDOUT, examples))


def logit_lens(task: Task, model: GPT, device: torch.device, examples: int) -> LogitLens:
    task = prompt_answer_task(task, "logit-lens")
    sequences = answer_sequences(task, examples)
    names = list(depths(model))
    queries = task.answer_queries()
    right, losses = [], []  # per chunk: (depths, n, answer)
    generator = seeded()
    with evaluating(model):
        for chunk in sequences.split(CHUNK):
            chunk = chunk.to(device)
            positions = position_ids(model, len(chunk), chunk.shape[1] - 1, generator)
            _, cache = model.run_with_cache(chunk[:, :-1], names=names, positions=positions)
            targets = chunk[:, queries.start + 1 : queries.stop + 1]  # (n, answer)
            logits = torch.stack([decode(model, cache[name][:, queries]) for name in names]).float()  # (D, n, A, V)
            right.append((logits.argmax(dim=-1) == targets).cpu())
            log_probs = log_softmax(logits)
            index = targets[None, :, :, None].expand(len(names), -1, -1, 1)
            losses.append(-log_probs.gather(-1, index).squeeze(-1).cpu().double())
    right_all, loss_all = torch.cat(right, dim=1), torch.cat(losses, dim=1)  # (D, N, A)
    return LogitLens(
        examples=len(sequences),
        depths=list(depths(model).values()),
        answer_positions=task.answer_position_names(),
        exact_match=right_all.all(dim=2).double().mean(dim=1).tolist(),
        loss=loss_all.mean(dim=(1, 2)).tolist(),
        accuracy=right_all.double().mean(dim=1).tolist(),
        position_loss=loss_all.mean(dim=1).tolist(),
    )
