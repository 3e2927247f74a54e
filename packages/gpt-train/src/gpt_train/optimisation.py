"""The learning-rate schedule and the optimiser a run trains with."""

from __future__ import annotations

import math

import torch

from gpt_core import GPT
from gpt_tasks import TrainSettings


def learning_rate(step: int, s: TrainSettings) -> float:
    """Linear warmup to lr, then cosine decay to min_lr at the last step (or constant)."""
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    if s.schedule == "constant":
        return s.lr
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model: GPT, s: TrainSettings) -> torch.optim.AdamW:
    """AdamW with weight decay on weight matrices only: not on norms and biases (vectors), and not on
    the position table unless asked, since shrinking it towards zero erases position information."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        is_position_table = name.startswith("wpe.")
        wants_decay = param.dim() >= 2 and (s.decay_position_embedding or not is_position_table)
        (decay if wants_decay else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # one fused kernel for every parameter: ~4x faster than the per-tensor loop on CPU
        return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2), fused=True)
    except RuntimeError:  # a device (or an older PyTorch) without the fused kernel
        return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2))
