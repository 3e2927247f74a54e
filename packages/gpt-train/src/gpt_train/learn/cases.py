"""The inputs a learner's kernel and each classic mistake are both run on: `gpt-train verify`'s cases of its slot
(odd sizes, one query, queries offset as in cached decoding, 133 positions, large inputs), the course's own, the same
in float32 (`in_float32`), and what a run gives."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from gpt_core import IGNORE_INDEX
from gpt_core.testing.verification import slot_cases
from gpt_train.learn.loading import attempt
from gpt_train.learn.steps import SAMPLING_SOFTMAX_SLOT
from gpt_train.verify import TORCH_LABELS, torch_references

SEED = 0  # of every check's inputs, models and draws: a check gives the same verdict every time


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple
    reference: Callable[..., Tensor]  # PyTorch's built-in on the same arguments: the right answer
    label: str  # how a message names the built-in


@dataclass(frozen=True)
class Outcome:
    """The output and the gradient of each float input for one fixed cotangent, or the exception raised."""

    output: Tensor | None
    grads: tuple[Tensor | None, ...]
    error: BaseException | None = None


def cases_for(kind: str, seed: int = 0) -> list[Case]:
    """`gpt-train verify`'s cases of the kind's slot, then the course's own: cross_entropy on large logits, softmax on
    the (B, V) logits generation samples from and on four dimensions, layer_norm with another eps where it matters."""
    references = torch_references()
    slot = SAMPLING_SOFTMAX_SLOT if kind == "softmax" else kind
    cases = [Case(name, args, theirs, TORCH_LABELS[reference])
             for name, reference, args, theirs in slot_cases(slot, references, seed)]  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    if kind == "softmax":  # verify's are (B, T, V): a softmax over dim=2 must fail too
        for name, shape in (
            ("logits (B, V), as generation samples from", (3, 11)),
            ("logits (B, H, T, V)", (2, 3, 4, 11)),
        ):
            x = torch.randn(shape, generator=gen, dtype=torch.float64, device="cpu").requires_grad_()
            cases.append(Case(name, (x,), references["softmax"], TORCH_LABELS["softmax"]))
    if kind == "layer_norm":  # verify's eps is always 1e-5: one written in for the argument passes them all
        x = (torch.randn(2, 5, 32, generator=gen, dtype=torch.float64, device="cpu") * 0.01).requires_grad_()
        weight, bias = (torch.randn(32, generator=gen, dtype=torch.float64, device="cpu").requires_grad_()
                        for _ in range(2))  # fmt: skip
        cases.append(
            Case("eps 1e-3, rows of variance 1e-4", (x, weight, bias, 1e-3), _layer_norm, TORCH_LABELS["layer_norm"])
        )
    if kind == "cross_entropy":
        logits = (torch.randn(14, 11, generator=gen, dtype=torch.float64, device="cpu") * 1e3).requires_grad_()
        targets = torch.randint(11, (14,), generator=gen, device="cpu")
        targets[::3] = IGNORE_INDEX
        label = TORCH_LABELS["cross_entropy"]
        cases.append(Case("ignore_index, logits x 1000", (logits, targets), references["cross_entropy"], label))
    return cases


def _layer_norm(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """F.layer_norm with the case's eps (verify's reference takes none: its eps is 1e-5)."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def in_float32(cases: list[Case]) -> list[Case]:
    """`cases` in float32, the dtype a model computes in: each float tensor rounded to it, a leaf of its own."""
    return [Case(f"{case.name}, in float32", tuple(_float32(arg) for arg in case.args), case.reference, case.label)
            for case in cases]  # fmt: skip


def _float32(arg: object) -> object:
    if not isinstance(arg, Tensor) or not arg.is_floating_point():
        return arg
    return arg.detach().to(torch.float32).requires_grad_(arg.requires_grad)


def run_case(kernel: Callable[..., Tensor], case: Case, seed: int = 0) -> Outcome:
    """Call `kernel` on the case, then backpropagate a fixed random cotangent to every float input."""
    leaves = [arg for arg in case.args if isinstance(arg, Tensor) and arg.requires_grad]
    fresh = {id(arg): arg.detach().clone().requires_grad_() for arg in leaves}  # no gradient left between calls
    args = [fresh.get(id(arg), arg) for arg in case.args]
    output = kernel(*args)
    if not isinstance(output, Tensor) or not output.requires_grad:
        return Outcome(output, ())  # no gradients: it is detached from the inputs
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
