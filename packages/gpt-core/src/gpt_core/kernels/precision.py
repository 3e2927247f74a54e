"""Mixed precision: the statistics of the fast kernels are computed in float32 for 16-bit inputs.

Under bf16 or fp16 activations, softmax's and log-softmax's max and sum, LayerNorm's mean and
variance, the cross-entropy's log-sum-exp and attention's softmax are computed on `upcast` inputs and
the result handed back in the input's dtype. A bf16 sum or mean of rows keeps 8 significant bits: a
LayerNorm mean rounded to bf16 is off by up to 2^-9 of the mean itself, which is the whole signal when
the mean is large against the spread; a loss of 10 rounded to bf16 is off by up to 0.03. Float32 and
float64 inputs take exactly the path they would without it (`upcast` hands them back untouched).
"""

from __future__ import annotations

import torch
from torch import Tensor

_HALF_PRECISION = (torch.float16, torch.bfloat16)


def upcast(x: Tensor) -> Tensor:
    """`x` in float32 if it is a 16-bit float (bf16, fp16), else `x` itself, uncopied: the dtype the
    fast kernels compute their statistics in."""
    return x.float() if x.dtype in _HALF_PRECISION else x
