"""The kernel table: the functions a model calls for its hand-written pieces, one slot each.

A `GPT` takes its kernels from one `Kernels` value (gpt-core's own by default) and hands each slot to
the modules that call it, so another implementation of a piece can be swapped in for one model alone:
nothing global changes, and two models in one process can use different kernels. Every slot has the
signature in KERNEL_SIGNATURES, which is what `verification.kernel_report` pins a replacement to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from torch import Tensor

from gpt_core.attention import attention
from gpt_core.functional import cross_entropy, gelu, layer_norm, softmax

KERNEL_SIGNATURES = {
    "attention": "(q, k, v, causal) -> output; q (B, H, Tq, d), k and v (B, H, Tk, d), scale 1/sqrt(d); causal: "
    "query i sits at position Tk - Tq + i and sees keys up to it (the KV-cache layout)",
    "softmax": "(x) -> softmax over the last dim (generate samples from it)",
    "layer_norm": "(x, weight, bias, eps) -> normalised over the last dim, times weight, plus bias (None: none)",
    "gelu": "(x) -> GELU, tanh approximation",
    "cross_entropy": "(logits (N, V), targets (N,)) -> mean loss over the targets not equal to IGNORE_INDEX (-100)",
}
"""Each slot of `Kernels`, with the signature a kernel for it must have."""

AttentionKernel = Callable[[Tensor, Tensor, Tensor, bool], Tensor]


@dataclass(frozen=True)
class Kernels:
    """The functions a model calls for attention, softmax, LayerNorm, GELU and the loss.

    Linear and Embedding are not slots: each is one tensor operation, with nothing to write by hand.
    gpt-core's own attention also gives the weights it computed and applies attention dropout; a
    swapped-in attention gives the output alone, so `GPT` refuses it with dropout, and computes the
    weights separately when they are asked for.
    """

    attention: AttentionKernel = attention
    softmax: Callable[[Tensor], Tensor] = softmax
    layer_norm: Callable[[Tensor, Tensor, Tensor | None, float], Tensor] = layer_norm
    gelu: Callable[[Tensor], Tensor] = gelu
    cross_entropy: Callable[[Tensor, Tensor], Tensor] = cross_entropy

    def swapped(self) -> list[str]:
        """The slots whose kernel is not gpt-core's own."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not f.default]

    def check_dropout(self, dropout: float) -> None:
        """Raise ValueError if a model with this attention dropout cannot use these kernels."""
        if dropout and self.attention is not attention:
            raise ValueError(
                f"dropout {dropout} needs gpt-core's own attention kernel: a swapped-in attention kernel applies "
                "no dropout to its weights; set dropout=0"
            )


KERNEL_SLOTS = tuple(f.name for f in fields(Kernels))
DEFAULT_KERNELS = Kernels()
