"""Mixed precision: the fast kernels' statistics (max and sum, mean and variance, log-sum-exp) are computed in
float32 for 16-bit inputs, whose 8 significant bits would be the whole signal of a large mean; other inputs as given."""

from __future__ import annotations

import torch
from torch import Tensor

_HALF_PRECISION = (torch.float16, torch.bfloat16)


def upcast(x: Tensor) -> Tensor:
    """`x` in float32 if it is a 16-bit float, else `x` itself, uncopied."""
    return x.float() if x.dtype in _HALF_PRECISION else x
