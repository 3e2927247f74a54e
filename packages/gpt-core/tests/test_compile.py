"""torch.compile: every kernel and a training step compiled agree with eager on each device there is, the fast
LayerNorm is the plain formula under the compiler, and the model compiles as one graph with no recompilation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpt_core import FAST_KERNELS, GPT, IGNORE_INDEX, REFERENCE_KERNELS, GPTConfig
from gpt_core.compiling import compiled
from gpt_core.kernels import layer_norm as fast_layer_norm_module
from gpt_core.testing import format_report
from gpt_core.testing.compiled import COMPILED_TOLERANCE, GraphCounter, compiled_report
from gpt_core.testing.verification import device_model_row, dropout_report

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the compiler's own, on importing it

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")),
    pytest.param("mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device here")),
]


def failures(rows, tolerance):
    return [message for row in rows if (message := row.failure(tolerance)) is not None]


@pytest.mark.parametrize("device", DEVICES)
def test_every_kernel_and_a_training_step_compiled_agree_with_eager(device):
    rows = compiled_report(FAST_KERNELS, device, seed=0)
    assert not failures(rows, COMPILED_TOLERANCE), format_report(rows)
    assert [row.component for row in rows][-1] == "compiled GPT training step"


@pytest.mark.parametrize("device", DEVICES[1:])
def test_the_reference_set_compiled_agrees_with_eager_on_the_accelerator(device):
    rows = compiled_report(REFERENCE_KERNELS, device, seed=0)
    assert not failures(rows, COMPILED_TOLERANCE), format_report(rows)


def layer_norm_wrong_when_compiled(x, weight, bias, eps):
    """Right eagerly; under the compiler its gradient with respect to x is off by the incoming gradient itself,
    the kind of error a compiler bug makes."""
    y = REFERENCE_KERNELS.layer_norm(x, weight, bias, eps)
    return y + (x - x.detach()) if torch.compiler.is_compiling() else y


def test_a_kernel_that_is_wrong_only_when_compiled_fails_the_compiled_report():
    kernels = dataclasses.replace(FAST_KERNELS, layer_norm=layer_norm_wrong_when_compiled)
    rows = compiled_report(kernels, "cpu", seed=0)
    failed = failures(rows, COMPILED_TOLERANCE)
    assert any(message.startswith("compiled LayerNorm: gradient 0 ") for message in failed), failed
    assert any(message.startswith("compiled GPT training step: gradient of ") for message in failed), failed


def test_under_the_compiler_the_fast_layer_norm_is_the_plain_formula_not_the_hand_written_backward(monkeypatch):
    """Inductor on CUDA compiled `_LayerNorm`'s backward wrong (gradients off by ~64): compiled, the fast kernel
    must not reach it, and must still agree with the eager kernel, which does."""

    def unreachable(*args, **kwargs):
        raise AssertionError("the hand-written LayerNorm was traced by the compiler")

    x = torch.randn(4, 16, 64, requires_grad=True)
    w, b = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)
    eager = FAST_KERNELS.layer_norm(x, w, b, 1e-5)
    eager_grads = torch.autograd.grad(eager.square().sum(), (x, w, b))
    monkeypatch.setattr(fast_layer_norm_module._LayerNorm, "forward", staticmethod(unreachable))
    torch._dynamo.reset()
    out = torch.compile(FAST_KERNELS.layer_norm, backend="aot_eager", fullgraph=True)(x, w, b, 1e-5)
    grads = torch.autograd.grad(out.square().sum(), (x, w, b))
    torch.testing.assert_close(out, eager)
    for got, expected in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_layer", [2, 12])
def test_a_training_step_with_read_and_an_evaluation_compile_whole_with_no_recompilation(n_layer):
    """fullgraph=True makes a graph break an error; a recompilation would be a third graph. `read` (the scored
    positions) shapes the last block by the data, which the model must not branch on under the compiler."""
    model = GPT(GPTConfig(vocab_size=13, block_size=16, n_layer=n_layer, n_head=2, n_embd=32))
    torch._dynamo.reset()
    counter = GraphCounter()
    forward = compiled(model, fullgraph=True, backend=counter)
    for step in range(3):
        idx, targets = torch.randint(13, (4, 16)), torch.randint(13, (4, 16))
        targets[:, : 5 + step] = IGNORE_INDEX  # a different number of scored positions each step
        out = forward(idx, targets, read=targets != IGNORE_INDEX)
        out.loss.backward()
        assert out.logits.shape == (4 * (11 - step), 13)
    assert counter.graphs == 1
    model.eval()
    with torch.no_grad():
        for _ in range(2):
            forward(idx, targets, read=targets != IGNORE_INDEX)
    assert counter.graphs == 2


@pytest.mark.parametrize(
    ("device", "dtype"),
    [
        ("cpu", torch.float32),
        pytest.param("cuda", torch.float64, marks=DEVICES[1].marks),
        pytest.param("mps", torch.float32, marks=DEVICES[2].marks),
    ],
)
def test_a_whole_gpt_on_a_device_matches_the_same_weights_on_the_cpu(device, dtype):
    gen = torch.Generator().manual_seed(0)
    row = device_model_row(gen, dtype, FAST_KERNELS, device)
    assert row.failure(1e-4 if dtype == torch.float32 else 1e-12) is None, row


def test_the_compiled_dropout_report_holds_for_the_fast_set_however_often_a_process_makes_it(torch_references):
    """One compilation per case's function, reused by a later report in the same process: with one compilation
    allowed per function, compiling the cases through one shared frame fails from the second case on (fullgraph
    turns the limit's hit into an error)."""
    with torch._dynamo.config.patch(recompile_limit=1):
        for _ in range(2):
            rows = dropout_report(FAST_KERNELS, torch_references, seed=0, compile=True)
            assert [row.component.startswith("compiled ") for row in rows] == [True] * 5
            assert not failures(rows, 1e-5), format_report(rows)
