"""A run's training settings, every value checked here, however the settings are made."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal, get_args

from gpt_core import KERNEL_SETS

TRITON_MISSING = "the triton set needs Triton (pip install 'gpt-core[triton]')"
"""Why "triton" is not among the kernel sets where Triton is not installed."""

Schedule = Literal["cosine", "constant"]
Dtype = Literal["fp32", "bf16", "fp16"]


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation and bookkeeping of a run; the defaults suit a small model on a CPU, a task overrides by name.

    lr warms up over `warmup_steps`, then follows `schedule`: cosine to `min_lr`, or constant, whose last
    `cooldown_steps` fall linearly to `min_lr`. `cooldown_trigger` x > 0 starts that cool-down at the first
    evaluation whose primary metric reaches x (one below x meanwhile restores `lr`); `steps` is then the longest
    run. `early_eval_every` N, when below `eval_every`, also evaluates every N steps up to `early_eval_until`.
    `snapshot_every` N keeps the weights every N steps. `dtype` is the forward pass's precision (autocast);
    `grad_accum` N splits each batch into N micro-batches; `kernels` names the kernel set (`gpt_core.KERNEL_SETS`).
    0 turns off `grad_clip` and Grokfast. Weight decay applies to matrices only (the position table with
    `decay_position_embedding`). `tf32` lets CUDA use TF32 for float32 products; evaluation is full float32 and
    draws none of the training's random numbers. `final_eval_limit` None scores the whole held-out split.
    """

    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    schedule: Schedule = "cosine"
    cooldown_steps: int = 0
    cooldown_trigger: float = 0.0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    eval_every: int = 250
    early_eval_every: int = 0
    early_eval_until: int = 0
    eval_limit: int = 2000
    seed: int = 1337
    log_every: int = 10
    checkpoint_every: int = 500
    snapshot_every: int = 0
    decay_position_embedding: bool = False
    compile: bool = False
    final_eval_limit: int | None = None
    grokfast_alpha: float = 0.98
    grokfast_lambda: float = 0.0
    dtype: Dtype = "fp32"
    grad_accum: int = 1
    kernels: str = "fast"
    tf32: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value}")
        for name in ("steps", "batch_size", "eval_every", "eval_limit", "log_every", "checkpoint_every", "grad_accum"):
            _require(getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}")
        never_negative = ("warmup_steps", "weight_decay", "grad_clip", "min_lr", "grokfast_lambda", "snapshot_every",
                          "early_eval_every", "early_eval_until", "cooldown_steps", "cooldown_trigger")  # fmt: skip
        for name in never_negative:
            _require(getattr(self, name) >= 0, f"{name} must not be negative, got {getattr(self, name)}")
        limit = self.final_eval_limit
        _require(limit is None or limit > 0, f"final_eval_limit must be positive, got {limit}")
        _require(0 <= self.seed < 2**63, f"seed must be in [0, 2**63), got {self.seed}")
        _require(self.lr > 0, f"lr must be positive, got {self.lr}")
        _require(self.min_lr <= self.lr, f"min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        betas_ok = 0 <= self.beta1 < 1 and 0 <= self.beta2 < 1
        _require(betas_ok, f"betas must be in [0, 1), got ({self.beta1}, {self.beta2})")
        _require(0 <= self.grokfast_alpha < 1, f"grokfast_alpha must be in [0, 1), got {self.grokfast_alpha}")
        for name, kind in (("schedule", Schedule), ("dtype", Dtype)):  # coerce checks these too, for --set
            choices = get_args(kind)
            _require(
                getattr(self, name) in choices,
                f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}",
            )
        _require(
            self.cooldown_steps == 0 or self.schedule == "constant",
            "cooldown_steps applies to the constant schedule (cosine already decays to min_lr); set schedule=constant",
        )
        sets = ", ".join(KERNEL_SETS)
        missing = f"{TRITON_MISSING}; " if self.kernels == "triton" else ""
        _require(self.kernels in KERNEL_SETS, f"{missing}kernels must be one of {sets}, got {self.kernels!r}")
        _require(
            self.batch_size % self.grad_accum == 0,
            f"batch_size ({self.batch_size}) must be a multiple of grad_accum ({self.grad_accum}): "
            "each step's batch is split into grad_accum equal micro-batches",
        )

    def last_step(self, triggered: int | None = None) -> int:
        """Where the run stops: `steps`, or `cooldown_steps` after step `triggered` when that comes earlier."""
        if triggered is None or not self.cooldown_steps:
            return self.steps
        return min(self.steps, triggered + self.cooldown_steps)

    def evaluates_at(self, step: int) -> bool:
        if step >= self.steps:
            return False
        early = 0 < self.early_eval_every < self.eval_every and step <= self.early_eval_until
        return step % self.eval_every == 0 or (early and step % self.early_eval_every == 0)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
