"""The inputs a learner's kernel and each classic mistake are both run on, shaped as `gpt-train verify`'s cases: odd
sizes, one query, queries offset as in cached decoding, 133 positions (a ragged tile), large inputs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from gpt_core import IGNORE_INDEX
from gpt_train.learn.loading import attempt

SEED = 0  # of every check's inputs, models and draws: a check gives the same verdict every time


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple


@dataclass(frozen=True)
class Outcome:
    """The output and the gradient of each float input for one fixed cotangent, or the exception raised."""

    output: Tensor | None
    grads: tuple[Tensor | None, ...]
    error: BaseException | None = None
    connected: bool = True  # the output carries a gradient back to the inputs (it requires grad)


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
    def targets() -> Tensor:
        drawn = torch.randint(11, (14,), generator=gen, device="cpu")
        drawn[::3] = IGNORE_INDEX
        return drawn

    return [
        Case("ignore_index", (_randn(gen, 14, 11), targets())),
        Case("ignore_index, logits x 1000", (_randn(gen, 14, 11, scale=1e3), targets())),
    ]


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


def cases_for(kind: str, seed: int = 0) -> list[Case]:
    return CASES[kind](torch.Generator().manual_seed(seed))


def _end_aligned_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """PyTorch's attention with the queries the last Tq of the Tk positions (query i sits at Tk - Tq + i)."""
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


REFERENCES: dict[str, tuple[str, Callable[..., Tensor]]] = {
    "softmax": ("torch.softmax", lambda x: torch.softmax(x, dim=-1)),
    "attention": ("F.scaled_dot_product_attention", _end_aligned_attention),
    "layer_norm": ("F.layer_norm", lambda x, weight, bias, eps: F.layer_norm(x, x.shape[-1:], weight, bias, eps)),
    "gelu": ("F.gelu(approximate='tanh')", lambda x: F.gelu(x, approximate="tanh")),
    "cross_entropy": ("F.cross_entropy", lambda logits, targets: F.cross_entropy(logits, targets,
                                                                                  ignore_index=IGNORE_INDEX)),
}  # fmt: skip
"""Each kind's PyTorch built-in, with the kernel's signature (the right answers), and how a message names it."""


def run_case(kernel: Callable[..., Tensor], case: Case, seed: int = 0) -> Outcome:
    """Call `kernel` on the case, then backpropagate a fixed random cotangent to every float input."""
    leaves = [arg for arg in case.args if isinstance(arg, Tensor) and arg.requires_grad]
    fresh = {id(arg): arg.detach().clone().requires_grad_() for arg in leaves}  # no gradient left between calls
    args = [fresh.get(id(arg), arg) for arg in case.args]
    output = kernel(*args)
    if not isinstance(output, Tensor) or not output.requires_grad:
        return Outcome(output, (), connected=False)
    generator = torch.Generator().manual_seed(seed)
    cotangent = torch.randn(output.shape, generator=generator, dtype=output.dtype, device="cpu")
    grads = torch.autograd.grad(output, [fresh[id(a)] for a in leaves], cotangent, allow_unused=True)
    return Outcome(output.detach(), grads)


MATCH = {"rtol": 1e-7, "atol": 1e-9}
"""How close a kernel's results must be to a mistake's: looser than a pass, since a learner writes the same mistake
in another order, and far tighter than any two mistakes."""


def close(a: object, b: object) -> bool:
    """Equal within MATCH where finite, and nan and inf (of the same sign) in the same places."""
    if a is None or b is None:
        return a is b
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.shape != b.shape:
        return False
    a, b = a.detach().double(), b.detach().double()
    finite = a.isfinite()
    if not (torch.equal(finite, b.isfinite()) and torch.equal(a.isnan(), b.isnan())):
        return False
    infinite = a.isinf()
    return torch.equal(a[infinite], b[infinite]) and torch.allclose(a[finite], b[finite], **MATCH)


def index_of(flat: int, shape: torch.Size) -> list[int]:
    return [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)] if len(shape) else []


def try_case(kernel: Callable[..., Tensor], case: Case, seed: int = 0) -> Outcome:
    """`run_case`, with whatever the kernel raises (but Ctrl-C) kept in the outcome's `error`."""
    outcome, error = attempt(functools.partial(run_case, kernel, case, seed))
    return outcome if error is None else Outcome(None, (), error)
