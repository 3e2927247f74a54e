"""torch.compile for gpt-core's model: one graph for a training step, and for an evaluation.

A forward given `read` keeps the rows whose logits are wanted, a count that depends on the data (the scored
positions). The compiler traces it as a size the graph takes as it comes (`capture_dynamic_output_shape_ops`)
instead of breaking the graph there; the model's other data-dependent choices, made for speed in eager mode,
are not taken under the compiler (`kernels/linear.py`). The fast LayerNorm is the plain formula under the
compiler (`kernels/layer_norm.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def compiled(model: F, **options: Any) -> F:
    """torch.compile(model, **options), with `read`'s row count traced rather than a graph break."""
    torch.compiler.config.capture_dynamic_output_shape_ops = True
    return torch.compile(model, **options)
