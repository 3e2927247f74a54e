"""torch.compile against eager: each kernel slot, and a whole GPT's training step, on a device, in float32.

A compiler can compute a model wrong where no eager check looks (a hand-written backward compiled wrong trains to
nothing), so each is compiled whole (`fullgraph`, a graph break fails its row) and compared with the eager call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from gpt_core.compiling import compiled
from gpt_core.kernels import Kernels
from gpt_core.model import GPT, GPTConfig
from gpt_core.reference import IGNORE_INDEX
from gpt_core.testing.verification import Row, _inputs_from, _leaf, _raised, compared

COMPILED_TOLERANCE = 1e-4
"""The largest difference accepted over max(1, |eager|): a fused kernel summing in another order moves a float32
result by a few roundings per term summed."""


class GraphCounter:
    """A torch.compile backend that counts the graphs it is given (a recompilation, a graph break)."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def _slot_cases(gen: torch.Generator) -> list[tuple[str, Callable[..., Tensor], Sequence[Tensor]]]:
    """(component, fn(kernels, *inputs), inputs drawn on the CPU) for each slot a training step calls."""

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, device="cpu").requires_grad_()

    targets = torch.randint(11, (28,), generator=gen, device="cpu")
    targets[::3] = IGNORE_INDEX
    return [
        ("attention (causal)", lambda kernels, q, k, v: kernels.attention(q, k, v, True),
         (randn(2, 4, 7, 16), randn(2, 4, 7, 16), randn(2, 4, 7, 16))),
        ("LayerNorm", lambda kernels, x, w, b: kernels.layer_norm(x, w, b, 1e-5),
         (randn(4, 16, 64), randn(64), randn(64))),
        ("GELU (tanh)", lambda kernels, x: kernels.gelu(x), (randn(2, 7, 32),)),
        ("cross_entropy (ignore_index)", lambda kernels, x, t: kernels.cross_entropy(x, t),
         (randn(28, 11), targets)),
    ]  # fmt: skip


def _kernel_row(component: str, fn, inputs: Sequence[Tensor], kernels: Kernels, gen, device) -> Row:
    inputs = [_leaf(x, device) for x in inputs]
    leaves = [x for x in inputs if x.requires_grad]
    label = "the same call, eager"
    eager = fn(kernels, *inputs)
    cotangent = torch.randn(eager.shape, generator=gen, device="cpu").to(device)
    eager_grads = torch.autograd.grad(eager, leaves, cotangent)
    torch.compiler.reset()
    try:
        got = compiled(lambda *xs: fn(kernels, *xs), fullgraph=True)(*inputs)
        grads = torch.autograd.grad(got, leaves, cotangent, allow_unused=True)
    except Exception as error:
        return Row(f"compiled {component}", label, math.inf, None, _raised("torch.compile", error)[1], relative=True)
    gradients = [(f"gradient {i}", a, b) for i, (a, b) in enumerate(zip(grads, eager_grads, strict=True))]
    return _compared(f"compiled {component}", label, [("output", got, eager)], gradients)


def _compared(component: str, label: str, outputs, gradients) -> Row:
    """On the CPU: MPS has no float64 to compare in."""
    pairs = [[(name, None if a is None else a.cpu(), b.cpu()) for name, a, b in each] for each in (outputs, gradients)]
    return compared(component, label, *pairs, relative=True)


def _model_step_row(kernels: Kernels, gen: torch.Generator, device) -> Row:
    """A training step of a 3-layer GPT, compiled (a copy with the same weights) against eager."""
    config = GPTConfig(vocab_size=11, block_size=13, n_layer=3, n_head=4, n_embd=64)
    with torch.device("cpu"):
        eager = GPT(config, kernels)
        model = GPT(config, kernels)
    model.load_state_dict(eager.state_dict())
    eager, model = eager.to(device), model.to(device)
    idx = torch.randint(10, (16, 13), generator=gen, device="cpu").to(device)
    targets = torch.randint(10, (16, 13), generator=gen, device="cpu")
    targets[:, :6] = IGNORE_INDEX  # a prompt, as the tasks' batches have
    targets = targets.to(device)
    read = targets != IGNORE_INDEX
    expected = eager(idx, targets, read=read)
    expected.loss.backward()
    torch.compiler.reset()
    component, label = "compiled GPT training step", "the same step, eager"
    try:
        got = compiled(model, fullgraph=True)(idx, targets, read=read)
        got.loss.backward()
    except Exception as error:
        return Row(component, label, math.inf, None, _raised("torch.compile", error)[1], relative=True)
    gradients = [
        (f"gradient of {name}", p.grad, q.grad)
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True)
    ]
    outputs = [("logits", got.logits, expected.logits), ("loss", got.loss, expected.loss)]
    return _compared(component, label, outputs, gradients)


def compiled_report(kernels: Kernels, device: torch.device | str = "cpu", seed: int | None = None) -> list[Row]:
    """Each kernel a training step calls, and a GPT's training step, compiled against eager, float32."""
    with _inputs_from(seed) as gen:
        rows = [_kernel_row(name, fn, inputs, kernels, gen, device) for name, fn, inputs in _slot_cases(gen)]
        rows.append(_model_step_row(kernels, gen, device))
    return rows
