"""Task probes: named scalars about how a model computes, measured beside its metrics at every evaluation.

A metric says whether a model is right; a probe says something about how (how much attention lands on
the digit an answer position must copy, whether digits that receive a carry are the ones still wrong).
A task opts in by overriding `Task.probes`, and `Task.probe_batch` when its probes read activations:
`measure_probes` runs the model once on that batch with every hook point cached (`GPT.run_with_cache`)
and hands the task a `ProbeCache`. A task without probes costs nothing: no forward pass is run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT
from gpt_tasks.task import Batch, Task, evaluating

PROBE_EXAMPLES = 256
"""Held-out examples a probe batch holds: enough that a share of attention reads to two decimals, cheap to
run at every evaluation (one forward pass with every hook point cached). Measured on the default sort task
(docs/results/inspect.md): 512 cost a third of an evaluation of 2,000 examples, 256 a sixth, and a run's
logged source_attention moved by at most 0.006 between the two."""


@dataclass(frozen=True)
class ProbeCache:
    """A model's activations on a task's probe batch: `cache["blocks.1.pattern"]` is the named hook point's
    tensor (see `GPT.hook_names`), `batch` the inputs it read and their targets."""

    batch: Batch
    activations: Mapping[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.activations[name]


def has_probes(task: Task) -> bool:
    """Whether the task overrides `Task.probes` (the default measures nothing)."""
    return type(task).probes is not Task.probes


def measure_probes(task: Task, model: GPT, device: torch.device | str) -> dict[str, float]:
    """The task's probes of `model`, in eval mode without gradients; {} for a task without probes."""
    if not has_probes(task):
        return {}
    batch = task.probe_batch()
    with evaluating(model):
        cache = None
        if batch is not None:
            batch = batch.to(device)
            _, activations = model.run_with_cache(batch.inputs)
            cache = ProbeCache(batch, activations)
        return task.probes(model, cache)
