"""Names kept working for one release after they were renamed: each warns once per process."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

if TYPE_CHECKING:
    from gpt_core.model import GPT


class DeprecatedNameWarning(DeprecationWarning):
    """A name of an earlier release, still working: shown once per process, naming its replacement (gpt-train's
    command line shows these, which Python hides by default)."""


_warned: set[str] = set()


def warn_deprecated(old: str, new: str, stacklevel: int = 2) -> None:
    """Warn that `old` is deprecated in favour of `new`, the first time in this process only: a caller that uses
    an old name hears about it once, not at every call."""
    if old in _warned:
        return
    _warned.add(old)
    message = f"{old} is deprecated and will be removed in a later release; use {new}"
    warnings.warn(message, DeprecatedNameWarning, stacklevel=stacklevel + 1)


class _LegacyOutput(NamedTuple):
    """What `return_attention=True` gave: the logits, the loss and the stacked weights."""

    logits: Tensor
    loss: Tensor | None
    attention: Tensor  # (n_layer, B, n_head, T, T_total)


def forward_with_attention(model: GPT, idx: Tensor, targets: Tensor | None, **kwargs: Any) -> _LegacyOutput:
    """The deprecated `return_attention=True`: the weights recorded from the pattern hooks."""
    replacement = "GPT.run_with_cache(idx, names) with the blocks' pattern names"
    warn_deprecated("GPT.forward(return_attention=True)", replacement)
    names = [name for name in model.hook_names() if name.endswith(".pattern")]
    weights: list[Tensor] = []
    with model.hooks(dict.fromkeys(names, lambda w, name: weights.append(w.detach()))):
        out = model(idx, targets, **kwargs)
    return _LegacyOutput(out.logits, out.loss, torch.stack(weights))
