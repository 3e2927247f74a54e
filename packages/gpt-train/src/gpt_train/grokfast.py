"""Grokfast (Lee et al. 2024): amplify the slow part of each gradient, a low-pass filter, as `gradfilter_ema` does:

ema <- alpha * ema + (1 - alpha) * g      (the first step's ema is its gradient)
g   <- g + lambda * ema
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Grokfast:
    """The EMA gradient filter; `apply` rewrites the gradients of a model after its backward pass."""

    def __init__(self, alpha: float, lamb: float):
        self.alpha, self.lamb = alpha, lamb
        self.ema: dict[str, Tensor] = {}

    def apply(self, model: nn.Module) -> None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.grad is None:
                    continue
                ema = self.ema.get(name)
                if ema is None:
                    ema = self.ema[name] = param.grad.clone()
                else:
                    ema.mul_(self.alpha).add_(param.grad, alpha=1.0 - self.alpha)
                param.grad.add_(ema, alpha=self.lamb)

    def state_dict(self) -> dict[str, Tensor]:
        return dict(self.ema)

    def load_state_dict(self, state: dict[str, Tensor], model: nn.Module) -> None:
        params = dict(model.named_parameters())
        for name, ema in state.items():
            if name not in params or params[name].shape != ema.shape:
                raise ValueError(f"Grokfast average {name!r} {tuple(ema.shape)} matches no parameter of this model")
        self.ema = {name: ema.to(params[name].device).clone() for name, ema in state.items()}
