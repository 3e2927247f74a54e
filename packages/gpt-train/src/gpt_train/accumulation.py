"""Gradient accumulation: a step's batch as micro-batches. Each micro-batch's mean loss is weighted by its share
n_i / n of the scored targets, so sum_i (n_i / n) (S_i / n_i) = S / n is exactly the whole batch's mean."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor

from gpt_core import IGNORE_INDEX
from gpt_tasks import Batch
from gpt_train.precision import Precision

Loss = Callable[[Tensor, Tensor, Tensor], Tensor]  # (inputs, targets, read) -> mean loss over the scored targets
NoSync = Callable[[], contextlib.AbstractContextManager]


def scored_counts(parts: list[Batch]) -> list[int]:
    return torch.stack([(part.targets != IGNORE_INDEX).sum() for part in parts]).tolist()


def micro_batch_weights(parts: list[Batch]) -> dict[int, float]:
    """The micro-batches to run and their weights n_i / n: none scoring nothing, unless all do (then weight 1)."""
    if len(parts) == 1:
        return {0: 1.0}
    counts = scored_counts(parts)
    total = sum(counts)
    if not total:
        return dict.fromkeys(range(len(parts)), 1.0)
    return {i: count / total for i, count in enumerate(counts) if count}


def accumulate_gradients(
    loss_of: Loss, batch: Batch, n: int, precision: Precision, device: torch.device, no_sync: NoSync | None = None
) -> Tensor:
    """Forward and backward of `batch` (on the host) as `n` micro-batches, adding the whole batch's gradient to .grad;
    returns its loss (detached). Each micro-batch is copied to `device` as it runs, its `read` mask (targets not
    IGNORE_INDEX) left on the host: counting and finding the scored rows never waits for a GPU. DDP's `no_sync` holds
    every backward but the last one's all-reduce."""
    parts = [Batch(*pair) for pair in zip(batch.inputs.chunk(n), batch.targets.chunk(n), strict=True)]
    weights = micro_batch_weights(parts)
    last = max(weights)
    losses = []
    for i, weight in weights.items():
        sync = no_sync is None or i == last
        part = parts[i].to(device)
        with contextlib.nullcontext() if sync else no_sync():
            with precision.autocast():
                loss = loss_of(part.inputs, part.targets, parts[i].targets != IGNORE_INDEX) * weight
            precision.backward(loss)
        losses.append(loss.detach())
    return sum(losses[1:], losses[0])
