"""Mixed precision: the fast kernels' statistics (softmax's max and sum, LayerNorm's mean and variance, the
log-sum-exp) are computed in float32 for 16-bit inputs, whose 8 significant bits would otherwise be the whole
signal of a large mean. Float32 and float64 inputs take exactly the path they would without it.
"""

from __future__ import annotations

import torch
from torch import Tensor

_HALF_PRECISION = (torch.float16, torch.bfloat16)


def upcast(x: Tensor) -> Tensor:
    """`x` in float32 if it is a 16-bit float, else `x` itself, uncopied."""
    return x.float() if x.dtype in _HALF_PRECISION else x
