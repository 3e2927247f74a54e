"""PyTorch's built-ins as the references gpt-core's hand-written pieces are checked against."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from gpt_core import IGNORE_INDEX


def torch_references() -> dict[str, Callable[..., Tensor]]:
    """Each built-in, adapted to the signature gpt_core.verification.REFERENCE_SIGNATURES names."""
    return {
        "linear": F.linear,
        "embedding": F.embedding,
        "layer_norm": lambda x, weight, bias: F.layer_norm(x, x.shape[-1:], weight, bias),
        "gelu": lambda x: F.gelu(x, approximate="tanh"),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "log_softmax": lambda x: torch.log_softmax(x, dim=-1),
        "cross_entropy": lambda logits, targets: F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX),
        "sdpa": lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
    }


TORCH_LABELS = {
    "linear": "F.linear",
    "embedding": "F.embedding",
    "layer_norm": "F.layer_norm",
    "gelu": "F.gelu(approximate='tanh')",
    "softmax": "torch.softmax",
    "log_softmax": "torch.log_softmax",
    "cross_entropy": "F.cross_entropy",
    "sdpa": "F.scaled_dot_product_attention",
}
"""How the verification table names each built-in."""


BF16_TOLERANCE = 2.0**-4
"""The largest difference accepted in `gpt-train verify --dtype bf16`, relative to the scale of the reference (its
largest |value|, or 1), which runs in float64 on the same bf16 values.

bf16 keeps 8 significant bits: one rounding moves a value by up to 2^-8 = 0.0039 of itself, and a kernel that
computes in bf16 rounds several times (attention: up to 0.026 over 1,000 fresh input draws, 7 roundings' worth).
2^-4 = 0.0625 is 16 roundings, 2.4x the largest difference seen, so fresh inputs do not fail a correct kernel. It
catches what goes wrong in 16 bits (an overflow, a dtype a kernel cannot take, an error of several percent);
smaller mistakes in the mathematics are below bf16's resolution: the float64 check pins those.
"""

FP32_TOLERANCE = 1e-4
"""The largest |difference| accepted where the kernels run in float32 (`gpt-train verify --device mps`: MPS has
no float64), the built-ins beside them in float32 too. float32 keeps 24 significant bits, 6e-8 relative: the
largest outputs checked (GELU of inputs x 30, up to ~100) round by ~1e-5, so 1e-4 passes a right kernel, and a
wrong scale, mask or formula is off by far more."""

DTYPES = {"fp64": torch.float64, "bf16": torch.bfloat16}
"""`gpt-train verify --dtype`: the dtype the kernels run in."""
