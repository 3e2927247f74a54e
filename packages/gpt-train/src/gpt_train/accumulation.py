"""Gradient accumulation: one optimiser step's batch as several micro-batches, forward and backward in turn.

A micro-batch's loss is the mean over its scored targets, and micro-batches need not score equally many (prompts
of different lengths). Weighting each micro-batch's mean by its share of the batch's scored targets, n_i / n,
makes the weighted sum exactly the whole batch's mean, sum_i (n_i / n) (S_i / n_i) = S / n; so the summed
gradients are those of the whole batch, not of an average of averages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor

from gpt_core import IGNORE_INDEX
from gpt_tasks import Batch
from gpt_train.precision import Precision

Loss = Callable[[Tensor, Tensor], Tensor]  # (inputs, targets) -> mean loss over the scored targets
NoSync = Callable[[], contextlib.AbstractContextManager]


def scored_counts(parts: list[Batch]) -> list[int]:
    """How many targets each micro-batch scores (one transfer from the device for all of them)."""
    return torch.stack([(part.targets != IGNORE_INDEX).sum() for part in parts]).tolist()


def micro_batch_weights(parts: list[Batch]) -> dict[int, float]:
    """The micro-batches to run, each with its share n_i / n of the batch's scored targets; those that score none
    are left out, unless none scores any: then all run with weight 1. A single micro-batch is not counted: counting
    waits for the device, which a step without accumulation should not do."""
    if len(parts) == 1:
        return {0: 1.0}
    counts = scored_counts(parts)
    total = sum(counts)
    if not total:
        return dict.fromkeys(range(len(parts)), 1.0)
    return {i: count / total for i, count in enumerate(counts) if count}


def accumulate_gradients(
    loss_of: Loss, batch: Batch, n: int, precision: Precision, no_sync: NoSync | None = None
) -> Tensor:
    """Forward and backward of `batch` as `n` micro-batches, adding to each parameter's .grad the gradient of the
    whole batch's mean loss; returns that loss (detached; nan, as the whole batch's, when no target is scored).
    `no_sync`, DistributedDataParallel's, is entered for every backward but the last one run, so each process
    all-reduces exactly once per step."""
    parts = [Batch(*pair) for pair in zip(batch.inputs.chunk(n), batch.targets.chunk(n), strict=True)]
    weights = micro_batch_weights(parts)
    last = max(weights)
    losses = []
    for i, weight in weights.items():
        sync = no_sync is None or i == last
        with contextlib.nullcontext() if sync else no_sync():
            with precision.autocast():
                loss = loss_of(parts[i].inputs, parts[i].targets) * weight
            precision.backward(loss)
        losses.append(loss.detach())
    return sum(losses[1:], losses[0])
