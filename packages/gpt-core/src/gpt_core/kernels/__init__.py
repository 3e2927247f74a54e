"""The kernel table: the functions a `GPT` calls for its hand-written pieces, swappable for one model alone.
REFERENCE_KERNELS is `gpt_core.reference`, each piece as its definition; FAST_KERNELS, the default, is this package's
modules, each opening with the maths it implements and why each of its tricks is there.

The fast and triton sets' hand-written backward passes differentiate once (`once.py`): second derivatives
(create_graph=True) need the reference set."""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields

from torch import Tensor

from gpt_core import reference
from gpt_core.kernels.attention import attention as fast_attention
from gpt_core.kernels.attention import attention_weights as fast_attention_weights
from gpt_core.kernels.cross_entropy import cross_entropy as fast_cross_entropy
from gpt_core.kernels.gelu import gelu as fast_gelu
from gpt_core.kernels.layer_norm import layer_norm as fast_layer_norm
from gpt_core.kernels.softmax import softmax as fast_softmax
from gpt_core.reference import softmax as reference_softmax

KERNEL_SIGNATURES = {
    "attention": "(q, k, v, causal) -> output; q (B, H, Tq, d), k and v (B, H, Tk, d), scale 1/sqrt(d); causal: "
    "query i sits at position Tk - Tq + i and sees keys up to it (the KV-cache layout); a kernel that also takes "
    "dropout_p applies attention dropout, and only such a kernel serves a model with dropout",
    "attention_weights": "(q, k, causal) -> the weights softmax(q k^T / sqrt(d)) (B, H, Tq, Tk), masked as "
    "attention's, differentiable; a model hooked at `pattern` computes its attention as these weights times v",
    "sampling_softmax": "(x) -> softmax over the last dim (generate samples from it; static decoding attends with it)",
    "layer_norm": "(x, weight, bias, eps) -> normalised over the last dim, times weight, plus bias (None: none)",
    "gelu": "(x) -> GELU, tanh approximation",
    "cross_entropy": "(logits (N, V), targets (N,)) -> mean loss over the targets not equal to IGNORE_INDEX (-100)",
    "dropout": "(x, p, training) -> in training, each element zeroed with probability p and the rest scaled by "
    "1/(1-p); x itself otherwise (the embeddings', each block's outputs' and a `pattern` hook's weights' dropout)",
}
"""Each slot of `Kernels`, with the signature a kernel for it must have."""


@dataclass(frozen=True)
class Kernels:
    """The functions a model calls for its hand-written pieces (Linear and Embedding are not slots)."""

    attention: Callable[..., Tensor] = fast_attention
    attention_weights: Callable[[Tensor, Tensor, bool], Tensor] = fast_attention_weights
    sampling_softmax: Callable[[Tensor], Tensor] = fast_softmax
    layer_norm: Callable[[Tensor, Tensor, Tensor | None, float], Tensor] = fast_layer_norm
    gelu: Callable[[Tensor], Tensor] = fast_gelu
    cross_entropy: Callable[[Tensor, Tensor], Tensor] = fast_cross_entropy
    dropout: Callable[[Tensor, float, bool], Tensor] = reference.dropout

    def swapped(self) -> list[str]:
        """The slots whose kernel is not the fast set's."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not f.default]

    def check_dropout(self, dropout: float) -> None:
        """Raise ValueError if the attention kernel takes no `dropout_p` and would silently apply no `dropout`."""
        if dropout and not _takes_dropout(self.attention):
            raise ValueError(
                f"dropout {dropout} needs gpt-core's own attention kernel (or one taking dropout_p): a swapped-in "
                "attention kernel applies no dropout to its weights; set dropout=0"
            )


def _takes_dropout(kernel: Callable[..., Tensor]) -> bool:
    try:
        return "dropout_p" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # a callable without a signature to read
        return False


KERNEL_SLOTS = tuple(f.name for f in fields(Kernels))
FAST_KERNELS = Kernels()
DEFAULT_KERNELS = FAST_KERNELS
REFERENCE_KERNELS = Kernels(
    attention=reference.attention,
    attention_weights=reference.attention_weights,
    sampling_softmax=reference_softmax,
    layer_norm=reference.layer_norm,
    gelu=reference.gelu,
    cross_entropy=reference.cross_entropy,
    dropout=reference.dropout,
)


class _KernelSets(Mapping[str, Kernels]):
    """The kernel sets gpt-core ships, by name; "triton" where Triton is installed, imported on first use."""

    def __init__(self, **sets: Kernels):
        self._sets = sets

    def __getitem__(self, name: str) -> Kernels:
        if name == "triton" and _triton_installed():
            from gpt_core.kernels.triton import TRITON_KERNELS

            return TRITON_KERNELS
        return self._sets[name]

    def __iter__(self) -> Iterator[str]:
        yield from self._sets
        if _triton_installed():
            yield "triton"

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


KERNEL_SETS: Mapping[str, Kernels] = _KernelSets(fast=FAST_KERNELS, reference=REFERENCE_KERNELS)
