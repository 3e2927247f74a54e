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
