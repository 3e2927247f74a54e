"""The learning-rate schedule and the optimiser a run trains with."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.optim.adamw import adamw

from gpt_core import GPT
from gpt_train.settings import TrainSettings


def learning_rate(step: int, s: TrainSettings, triggered: int | None = None) -> float:
    """The learning rate at `step`, as `TrainSettings` describes it; from step `triggered`, min_lr at once (also
    inside the warm-up)."""
    if triggered is not None and s.cooldown_steps and step >= triggered:
        return s.min_lr
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    if s.schedule == "constant":
        length = min(s.cooldown_steps, s.steps - s.warmup_steps)  # a shorter run cools from the warm-up's end
        cooling = step - (s.steps - length)  # steps into the cool-down (negative before it)
        return s.lr if cooling < 0 else s.lr + (s.min_lr - s.lr) * cooling / length
    progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + math.cos(math.pi * min(1.0, progress)))


class FusedAdamW:
    """torch.optim.AdamW(fused=True)'s numbers and `state_dict`, bit for bit, without its import of torch._dynamo
    (a second of start-up). Like it, it takes fp16's verdict from GradScaler on the device: the scaler sets
    `found_inf` (and `grad_scale` where the gradients are still scaled) before `step`, and the kernel skips the update
    where gradients were not finite, so the scaler never reads the device."""

    _step_supports_amp_scaling = True

    def __init__(self, groups: list[dict[str, Any]], lr: float, betas: tuple[float, float], eps: float = 1e-8):
        self.param_groups = [
            {"params": list(g["params"]), "lr": lr, "betas": betas, "eps": eps, "weight_decay": g["weight_decay"]}
            for g in groups
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def _state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        if param not in self.state:  # as torch.optim.AdamW(fused=True) starts it: a float32 step on the device
            zeros = torch.zeros_like(param, memory_format=torch.preserve_format)
            step = torch.zeros((), dtype=torch.float32, device=param.device)
            self.state[param] = {"step": step, "exp_avg": zeros, "exp_avg_sq": zeros.clone()}
        return self.state[param]

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            states = [self._state(p) for p in params]
            beta1, beta2 = group["betas"]
            adamw(params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                  [], [s["step"] for s in states], fused=True, amsgrad=False, beta1=beta1, beta2=beta2,
                  lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
                  grad_scale=getattr(self, "grad_scale", None), found_inf=getattr(self, "found_inf", None))  # fmt: skip

    def zero_grad(self) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                param.grad = None

    def _index(self) -> dict[torch.Tensor, int]:
        params = [p for group in self.param_groups for p in group["params"]]
        return {p: i for i, p in enumerate(params)}

    def state_dict(self) -> dict[str, Any]:
        index = self._index()
        groups = [{k: v for k, v in g.items() if k != "params"} | {"params": [index[p] for p in g["params"]]}
                  for g in self.param_groups]  # fmt: skip
        return {"state": {index[p]: dict(s) for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore a `state_dict()` of this class or of torch.optim.AdamW, hyperparameters included."""
        sizes, ours = ([len(g["params"]) for g in groups] for groups in (saved["param_groups"], self.param_groups))
        if sizes != ours:
            raise ValueError(f"its parameter groups hold {sizes} parameters, this run's optimiser's {ours}")
        for group, kept in zip(self.param_groups, saved["param_groups"], strict=True):
            group.update({k: kept[k] for k in ("lr", "eps", "weight_decay")}, betas=tuple(kept["betas"]))
        params = {i: p for p, i in self._index().items()}
        self.state = {}
        for i, slots in saved["state"].items():
            param = params[int(i)]
            self.state[param] = {
                "step": slots["step"].to(torch.float32).to(param.device).reshape(()),
                "exp_avg": slots["exp_avg"].to(param),
                "exp_avg_sq": slots["exp_avg_sq"].to(param),
            }


Optimizer = FusedAdamW | torch.optim.Optimizer


def fused_adamw_runs_on(device: torch.device) -> bool:
    param, grad, exp_avg, exp_avg_sq, step = (torch.zeros(1, device=device) for _ in range(5))
    try:
        adamw([param], [grad], [exp_avg], [exp_avg_sq], [], [step], fused=True, amsgrad=False, beta1=0.9,
              beta2=0.99, lr=0.0, weight_decay=0.0, eps=1e-8, maximize=False)  # fmt: skip
    except (NotImplementedError, RuntimeError):  # no fused kernel for this device
        return False
    return True


def make_optimizer(model: GPT, s: TrainSettings) -> Optimizer:
    """AdamW, fused where the device has it, decaying weight matrices only (the position table only if asked)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        is_position_table = name.startswith("wpe.")
        wants_decay = param.dim() >= 2 and (s.decay_position_embedding or not is_position_table)
        (decay if wants_decay else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    device = next(model.parameters()).device
    if fused_adamw_runs_on(device):
        return FusedAdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2))
    return torch.optim.AdamW(groups, lr=s.lr, betas=(s.beta1, s.beta2))
