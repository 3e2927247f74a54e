"""Grokfast (Lee et al. 2024, "Grokfast: Accelerated Grokking by Amplifying Slow Gradients").

Grokking's delay is the slow drift of the weights (under weight decay) from a memorising solution
to a generalising one, buried under the fast, noisy part of each gradient. Grokfast keeps an
exponential moving average of every parameter's gradient (a low-pass filter) and adds it, amplified,
to the gradient before the optimiser step:

    ema <- alpha * ema + (1 - alpha) * g      (the first step's ema is its gradient)
    g   <- g + lambda * ema

as the authors' `gradfilter_ema` does. The averages are training state: a checkpoint holds them, so
a resumed run continues exactly as an uninterrupted one.
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
        """Update each parameter's gradient average, then add `lamb` times it to the gradient."""
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
        """Take saved averages, refusing any that name or shape no parameter of `model` (ValueError)."""
        params = dict(model.named_parameters())
        for name, ema in state.items():
            if name not in params or params[name].shape != ema.shape:
                raise ValueError(f"Grokfast average {name!r} {tuple(ema.shape)} matches no parameter of this model")
        self.ema = {name: ema.to(params[name].device).clone() for name, ema in state.items()}
