"""The inputs a learner's kernel and each classic mistake are both run on, to tell which mistake it is.

They follow the shapes of `gpt-train verify`'s cases (gpt_core.verification): odd sizes, one query,
queries offset as in cached decoding, 133 positions (several tiles and a ragged one), large inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import IGNORE_INDEX


@dataclass(frozen=True)
class Case:
    """One call of a kernel: its arguments (float tensors are float64 leaves wanting a gradient)."""

    name: str
    args: tuple


@dataclass(frozen=True)
class Outcome:
    """What a kernel gave on a case: the output and the gradient of each float input, for one fixed cotangent."""

    output: Tensor
    grads: tuple[Tensor | None, ...]


def _randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> Tensor:
    return (torch.randn(*shape, generator=gen, dtype=torch.float64, device="cpu") * scale).requires_grad_()


def _attention(gen: torch.Generator) -> list[Case]:
    def qkv(b: int, h: int, tq: int, tk: int, d: int) -> tuple[Tensor, Tensor, Tensor]:
        return _randn(gen, b, h, tq, d), _randn(gen, b, h, tk, d), _randn(gen, b, h, tk, d)

    return [
        Case("causal", (*qkv(2, 4, 7, 7, 16), True)),
        Case("non-causal", (*qkv(2, 4, 7, 7, 16), False)),
        Case("causal, queries offset by 4", (*qkv(2, 4, 3, 7, 16), True)),
        Case("causal, single query", (*qkv(2, 4, 1, 7, 16), True)),
        Case("causal, 133 positions", (*qkv(1, 3, 133, 133, 5), True)),
        Case("non-causal, 133 positions", (*qkv(1, 3, 133, 133, 5), False)),
        Case("causal, 70 queries offset by 63", (*qkv(1, 3, 70, 133, 5), True)),
    ]


def _cross_entropy(gen: torch.Generator) -> list[Case]:
    targets = torch.randint(11, (14,), generator=gen, device="cpu")
    targets[::3] = IGNORE_INDEX
    return [Case("ignore_index", (_randn(gen, 14, 11), targets))]


CASES: dict[str, Callable[[torch.Generator], list[Case]]] = {
    "softmax": lambda g: [
        Case("softmax", (_randn(g, 2, 7, 11),)),
        Case("logits x 1000", (_randn(g, 2, 7, 11, scale=1e3),)),
    ],
    "attention": _attention,
    "layer_norm": lambda g: [
        Case("LayerNorm", (_randn(g, 2, 7, 32), _randn(g, 32), _randn(g, 32), 1e-5)),
        Case("LayerNorm without bias", (_randn(g, 2, 7, 32), _randn(g, 32), None, 1e-5)),
    ],
    "gelu": lambda g: [
        Case("GELU", (_randn(g, 2, 7, 32),)),
        Case("GELU, inputs x 30", (_randn(g, 2, 7, 32, scale=30.0),)),
    ],
    "cross_entropy": _cross_entropy,
}  # fmt: skip
"""Each kernel step's cases, keyed by the kind of kernel (the softmax step's whatever its slot is called)."""


def cases_for(kind: str, seed: int = 0) -> list[Case]:
    """The cases of `kind`, the same on every call."""
    return CASES[kind](torch.Generator().manual_seed(seed))


def run_case(kernel: Callable[..., Tensor], case: Case, seed: int = 0) -> Outcome:
    """Call `kernel` on the case, then backpropagate a fixed random cotangent to every float input.
    Whatever the kernel raises is the caller's to report."""
    leaves = [arg for arg in case.args if isinstance(arg, Tensor) and arg.requires_grad]
    fresh = {id(arg): arg.detach().clone().requires_grad_() for arg in leaves}  # no gradient left between calls
    args = [fresh.get(id(arg), arg) for arg in case.args]
    output = kernel(*args)
    if not isinstance(output, Tensor) or not output.requires_grad:
        return Outcome(output, ())
    generator = torch.Generator().manual_seed(seed)
    cotangent = torch.randn(output.shape, generator=generator, dtype=output.dtype, device="cpu")
    grads = torch.autograd.grad(output, [fresh[id(a)] for a in leaves], cotangent, allow_unused=True)
    return Outcome(output.detach(), grads)
