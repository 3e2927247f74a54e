"""The triton set under torch.compile, traced for an sm_90 GPU from a CPU: a training step is one graph.

On a GPU, `gpt-train run --compile` hands the model to `gpt_core.compiled`: Dynamo traces each Triton launch into
the graph, and AOTAutograd traces the backward. Tracing runs on fake tensors. It needs Triton's compiler, for each
kernel's TTIR (which arguments it writes), but not a GPU. Here Dynamo is told that Triton runs, Triton is told that
its GPU is an sm_90, and the compiler backend stops as soon as it holds the forward and backward graphs, before
anything runs. A graph break (a host read, a call Dynamo cannot trace) shows as a first graph that stops short.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
import torch.utils._triton

if os.environ.get("TRITON_INTERPRET") == "1":
    reason = "Dynamo traces Triton's compiled kernels, not its interpreter (TRITON_INTERPRET=0)"
    pytest.skip(reason, allow_module_level=True)
triton = pytest.importorskip("triton")
from functorch.compile import min_cut_rematerialization_partition  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._dynamo.exc import BackendCompilerFailed  # noqa: E402
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

import gpt_core.kernels.triton as triton_set  # noqa: E402
from gpt_core import GPT, IGNORE_INDEX, GPTConfig  # noqa: E402
from gpt_core.compiling import compiled  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

N_LAYER = 2


class Traced(Exception):
    """The graphs are in hand: stop before anything runs."""


class Sm90:
    """Triton's driver, as far as tracing asks: the GPU it would compile for."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)


@pytest.fixture
def for_an_sm90(monkeypatch):
    monkeypatch.setattr(torch.utils._triton, "has_triton", lambda: True)  # Dynamo traces Triton launches
    monkeypatch.setattr(triton_set, "interpreted", lambda: True)  # CPU tensors pass the set's device check
    monkeypatch.setattr(triton.runtime.driver, "_active", Sm90())  # set_active, undone on leaving
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def traced_step(dropout: float) -> dict[str, torch.fx.GraphModule]:
    """The first graphs torch.compile makes of a training step of a 2-layer GPT with the triton set, as the trainer
    compiles it (no fullgraph, `read` given): {"forward", "backward"}, or {"inference"} if no gradient is in it."""
    graphs = {}

    def partition(joint, inputs, **kwargs):
        graphs["forward"], graphs["backward"] = min_cut_rematerialization_partition(joint, inputs, **kwargs)
        raise Traced

    def inference(graph, inputs):
        graphs["inference"] = graph
        raise Traced

    config = GPTConfig(vocab_size=11, block_size=16, n_layer=N_LAYER, n_head=2, n_embd=32, dropout=dropout)
    model = GPT(config, kernels=triton_set.TRITON_KERNELS).train()
    idx, targets = torch.randint(11, (2, 16)), torch.randint(11, (2, 16))
    targets[:, :5] = IGNORE_INDEX
    forward = compiled(model, backend=aot_autograd(fw_compiler=inference, partition_fn=partition))
    with pytest.raises(BackendCompilerFailed) as stopped:
        forward(idx, targets, read=targets != IGNORE_INDEX)
    assert isinstance(stopped.value.inner_exception, Traced)
    return graphs


def launches(graph: torch.fx.GraphModule) -> list[tuple[str, dict[str, str]]]:
    """(kernel name, {tensor or symbolic argument: the node it is}) for each Triton launch, in order."""
    return [
        (kernel_side_table.get_kernel(node.kwargs["kernel_idx"]).fn.__name__,
         {arg: str(value) for arg, value in node.kwargs["kwargs"].items()})
        for node in graph.graph.nodes
        if "triton_kernel_wrapper" in str(node.target)
    ]  # fmt: skip


def test_a_compiled_training_step_is_one_graph_holding_every_kernel_of_the_set_forward_and_backward(for_an_sm90):
    graphs = traced_step(dropout=0.1)
    assert set(graphs) == {"forward", "backward"}
    forward = Counter(name for name, _ in launches(graphs["forward"]))
    backward = Counter(name for name, _ in launches(graphs["backward"]))
    dropouts = 2 * N_LAYER + 1  # the embeddings, and each block's attention and MLP outputs
    assert forward == {"_attn_fwd": N_LAYER, "_layer_norm_forward_kernel": 2 * N_LAYER + 1,
                       "_gelu_forward_kernel": N_LAYER, "_dropout_kernel": dropouts,
                       "_cross_entropy_forward_kernel": 1}  # fmt: skip
    assert backward == {"_bwd_preprocess": N_LAYER, "_bwd_dkdv": N_LAYER, "_bwd_dq": N_LAYER,
                        "_layer_norm_backward_kernel": 2 * N_LAYER + 1, "_gelu_backward_kernel": N_LAYER,
                        "_dropout_kernel": dropouts, "_cross_entropy_backward_kernel": 1}  # fmt: skip


def test_each_compiled_backward_kernel_regenerates_the_very_mask_its_forward_drew(for_an_sm90):
    """A seed drawn again in the backward would give gradients of another mask than the loss saw: wrong, silently.
    Each forward launch draws its own seed; the backward launches take those very nodes, each once a kernel."""
    graphs = traced_step(dropout=0.1)
    forward, backward = launches(graphs["forward"]), launches(graphs["backward"])
    for kernels, seed in [(("_attn_fwd", "_bwd_dq", "_bwd_dkdv"), "seed"), (("_dropout_kernel",) * 2, "SEED")]:
        drawn = Counter(args[seed] for name, args in forward if name == kernels[0])
        assert len(drawn) == sum(drawn.values()) > 1  # a seed of its own for each launch
        for name in kernels[1:]:
            assert Counter(args[seed] for kernel, args in backward if kernel == name) == drawn


def test_the_compiled_step_reads_nothing_back_and_draws_each_attention_seed_by_its_own_operator(for_an_sm90):
    """The attention's seed is an int drawn on the CPU by an operator of its own, which the graph calls as it is
    (the seeds eager draws); nothing in the step is read back from the device, so the GPU never waits on the host."""
    graphs = traced_step(dropout=0.1)
    calls = [node for graph in graphs.values() for node in graph.graph.nodes if node.op == "call_function"]
    assert not [node for node in calls if node.target == torch.ops.aten._local_scalar_dense.default]
    drawn = [node for node in calls if node.target == torch.ops.gpt_core.attention_dropout_seed.default]
    assert len(drawn) == N_LAYER
    seeds = {args["seed"] for name, args in launches(graphs["forward"]) if name == "_attn_fwd"}
    assert seeds == {node.name for node in drawn}


def test_without_dropout_the_compiled_step_draws_no_seed(for_an_sm90):
    graphs = traced_step(dropout=0.0)
    assert "_dropout_kernel" not in {name for name, _ in launches(graphs["forward"])}
    drawing = ("randint", "attention_dropout_seed")
    assert not [node for node in graphs["forward"].graph.nodes if any(name in str(node.target) for name in drawing)]


def test_compiled_each_attention_seed_is_drawn_in_the_training_graph_as_eager_draws_it():
    """Inductor keeps the seed operator in a training graph as a call to it (here for the CPU, where the rest of
    the graph becomes C++): `torch.manual_seed` gives a compiled step the seeds eager draws, a new one for each
    attention's q."""
    from gpt_core.kernels.triton.attention import draw_seed

    qs = [torch.ones(2, dtype=torch.float64, requires_grad=True) for _ in range(2)]  # seeds below 2^31: exact
    step = compiled(lambda a, b: (a * draw_seed(a), b * draw_seed(b)), fullgraph=True)
    torch.manual_seed(0)
    eager = [draw_seed(q) for q in qs]
    torch.manual_seed(0)
    assert [int(y[0]) for y in step(*qs)] == eager
    assert eager[0] != eager[1]
