"""Teacher-forced scoring: the evaluation loop of every task that scores a model by its loss on
the true next tokens rather than by generating (modadd, shakespeare, a plugin's language model).

The loop is always the same: cut the examples into chunks, turn each chunk into a Batch, run the
model once, and average the cross-entropy over the scored targets (those not IGNORE_INDEX); only
how examples become batches differs, and that is the task's `make_batch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpt_core import GPT, IGNORE_INDEX, cross_entropy
from gpt_tasks.task import Batch, evaluating


@dataclass(frozen=True)
class Scores:
    """loss: the mean cross-entropy over every scored target (nats per scored token);
    accuracy: the fraction of scored targets that are the model's most likely token;
    examples: how many examples were scored; targets: how many targets (loss * targets is the total)."""

    loss: float
    accuracy: float
    examples: int
    targets: int


def score_examples(
    model: GPT,
    examples: torch.Tensor,
    make_batch: Callable[[torch.Tensor], Batch],
    device: torch.device | str,
    chunk_size: int,
) -> Scores:
    """Score `model` on `examples` (N, ...), `chunk_size` at a time, each chunk made into a Batch by
    `make_batch`, in eval mode without gradients. Examples may score different numbers of targets: the
    loss weighs every scored target alike."""
    total_loss, correct, scored = 0.0, 0, 0
    with evaluating(model):
        for chunk in examples.split(chunk_size):
            batch = make_batch(chunk).to(device)
            mask = batch.targets != IGNORE_INDEX  # (n, T)
            logits = model(batch.inputs).logits[mask].float()  # (scored, V)
            targets = batch.targets[mask]  # (scored,)
            total_loss += float(cross_entropy(logits, targets)) * len(targets)
            correct += int((logits.argmax(dim=-1) == targets).sum())
            scored += len(targets)
    return Scores(loss=total_loss / scored, accuracy=correct / scored, examples=len(examples), targets=scored)
