"""Names kept working for one release after they were renamed: each warns once per process."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from gpt_core.model import GPT

_warned: set[str] = set()


def warn_once(old: str, new: str) -> None:
    """A DeprecationWarning, the first time in this process only, that `old` is deprecated for `new`."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}", DeprecationWarning, 3)


class _LegacyOutput(NamedTuple):
    """What `return_attention=True` gave: the logits, the loss and the stacked weights."""

    logits: Tensor
    loss: Tensor | None
    attention: Tensor  # (n_layer, B, n_head, T, T_total)


def forward_with_attention(model: GPT, idx: Tensor, targets: Tensor | None, **kwargs: Any) -> _LegacyOutput:
    """The deprecated `return_attention=True`: the weights recorded from the pattern hooks."""
    warn_once("GPT.forward(return_attention=True)", "GPT.run_with_cache(idx, names) with the blocks' pattern names")
    names = [name for name in model.hook_names() if name.endswith(".pattern")]
    weights: list[Tensor] = []
    with model.hooks(dict.fromkeys(names, lambda w, name: weights.append(w.detach()))):
        out = model(idx, targets, **kwargs)
    return _LegacyOutput(out.logits, out.loss, torch.stack(weights))
