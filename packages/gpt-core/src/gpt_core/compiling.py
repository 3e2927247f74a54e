"""torch.compile for gpt-core's model: one graph for a training step, and one for an evaluation; the eager-only
data-dependent shortcuts are skipped under the compiler (`kernels/linear.py`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def compiled(model: F, **options: Any) -> F:
    """torch.compile(model, **options), with `read`'s row count and the triton attention's dropout seeds (an int
    drawn on the CPU by an operator of its own, `kernels/triton/attention.py`) traced rather than a graph break."""
    torch.compiler.config.capture_dynamic_output_shape_ops = True
    return torch.compile(model, **options)
