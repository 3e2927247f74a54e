"""PyTorch's built-ins as the references gpt-core's hand-written pieces are checked against."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpt_core import IGNORE_INDEX

TORCH_BUILTINS: dict[str, tuple[str, Callable[..., Tensor]]] = {
    "linear": ("F.linear", F.linear),
    "embedding": ("F.embedding", F.embedding),
    "layer_norm": ("F.layer_norm", lambda x, weight, bias: F.layer_norm(x, x.shape[-1:], weight, bias)),
    "gelu": ("F.gelu(approximate='tanh')", lambda x: F.gelu(x, approximate="tanh")),
    "softmax": ("torch.softmax", lambda x: torch.softmax(x, dim=-1)),
    "log_softmax": ("torch.log_softmax", lambda x: torch.log_softmax(x, dim=-1)),
    "cross_entropy": ("F.cross_entropy", lambda logits, targets: F.cross_entropy(logits, targets,
                                                                                  ignore_index=IGNORE_INDEX)),
    "sdpa": ("F.scaled_dot_product_attention", lambda q, k, v, causal: _sdpa(q, k, v, causal)),
}  # fmt: skip
"""Each reference gpt-core's verification needs (its REFERENCE_SIGNATURES), by name: how a message names it, and it."""
TORCH_LABELS = {name: label for name, (label, _) in TORCH_BUILTINS.items()}


def _sdpa(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """F.scaled_dot_product_attention by its math backend: its backward can be differentiated again (the CPU's fused
    float64 one cannot), so second derivatives through attention have a reference too."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def torch_references() -> dict[str, Callable[..., Tensor]]:
    return {name: reference for name, (_, reference) in TORCH_BUILTINS.items()}


BF16_TOLERANCE = 2.0**-4
"""`verify --dtype bf16`'s limit, relative to the float64 reference's largest |value| (or 1): 16 of bf16's 2^-8
roundings, above what a correct kernel's several roundings reach; smaller mistakes are the float64 check's."""
FP32_TOLERANCE = 1e-4  # where the kernels run in float32 (MPS): far above float32's rounding of outputs up to ~100
DTYPES = {"fp64": torch.float64, "bf16": torch.bfloat16}  # `gpt-train verify --dtype`
