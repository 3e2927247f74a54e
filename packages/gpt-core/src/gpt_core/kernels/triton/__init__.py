"""The Triton kernel set: attention, LayerNorm, GELU, the loss, softmax and dropout as hand-written GPU kernels.

Each module is one piece, opening with the maths it computes and why it is fast on a GPU:
    attention.py      FlashAttention-2: tiled, online softmax, P recomputed in the backward, dropout regenerated
    layer_norm.py     one pass per row forward and backward, weight and bias gradients from per-block sums
    cross_entropy.py  an online log-sum-exp over the vocabulary; the (N, V) softmax never stored
    gelu.py           the tanh approximation and its derivative, one elementwise kernel each way
    softmax.py        sampling's softmax, and the attention weights a `pattern` hook reads
    dropout.py        one elementwise kernel each way, its mask regenerated from a seed instead of stored

`TRITON_KERNELS` is the table (`gpt_core.KERNEL_SETS["triton"]`, `gpt-train run --kernels triton`). The kernels
run on CUDA tensors; on the CPU they run only in Triton's interpreter (TRITON_INTERPRET=1, set before Triton is
imported), which executes the very same kernel code on CPU tensors, float64 included: that is how they are
verified without a GPU (`nox -s triton`, `gpt-train verify --kernels triton`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch
from torch import Tensor

from gpt_core.kernels import Kernels
from gpt_core.kernels.triton.attention import attention
from gpt_core.kernels.triton.cross_entropy import cross_entropy
from gpt_core.kernels.triton.dropout import dropout
from gpt_core.kernels.triton.gelu import gelu
from gpt_core.kernels.triton.layer_norm import layer_norm
from gpt_core.kernels.triton.softmax import attention_weights, softmax


def interpreted() -> bool:
    """Whether Triton runs its kernels in the interpreter (on CPU tensors) rather than compiled for a GPU."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _on_its_device(kernel: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`kernel` launched on its tensor's GPU (Triton launches on the current device), refusing in one line a CPU
    tensor outside the interpreter (where Triton would fail deep inside)."""

    @functools.wraps(kernel)
    def checked(x: Tensor, *args, **kwargs) -> Tensor:
        if x.is_cuda:
            with torch.cuda.device(x.device):
                return kernel(x, *args, **kwargs)
        if not interpreted():
            raise ValueError(
                "the triton kernel set runs on CUDA tensors (or on the CPU in Triton's interpreter, TRITON_INTERPRET=1 "
                f"set before Triton is imported), got a tensor on {x.device.type}; use the fast set there"
            )
        return kernel(x, *args, **kwargs)

    return checked


TRITON_KERNELS = Kernels(
    attention=_on_its_device(attention),
    attention_weights=_on_its_device(attention_weights),
    sampling_softmax=_on_its_device(softmax),
    layer_norm=_on_its_device(layer_norm),
    gelu=_on_its_device(gelu),
    cross_entropy=_on_its_device(cross_entropy),
    dropout=_on_its_device(dropout),
)
"""The Triton set: every slot a hand-written Triton kernel."""
