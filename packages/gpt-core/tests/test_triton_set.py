"""The triton kernel set as a whole: a GPT computed with it is the reference set's GPT, it keeps no more for its
backward than PyTorch's own kernels, and it refuses where it cannot run. Without a GPU the kernels run in Triton's
interpreter, on CPU tensors, in float64."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels then run on the CPU
pytest.importorskip("triton")

import torch.nn.functional as F  # noqa: E402  (the reference, in tests only)

from gpt_core import GPT, KERNEL_SETS, KERNEL_SLOTS, REFERENCE_KERNELS, GPTConfig, generate  # noqa: E402
from gpt_core.decode import StaticDecoder  # noqa: E402
from gpt_core.kernels.triton import TRITON_KERNELS  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.float64 if DEVICE == "cpu" else torch.float32
TOLERANCE = 1e-12 if DEVICE == "cpu" else 1e-4


def pair(**shape) -> tuple[GPT, GPT]:
    """The same weights under the triton and the reference set."""
    config = GPTConfig(vocab_size=11, block_size=12, n_layer=2, n_head=2, n_embd=32, **shape)
    torch.manual_seed(0)
    ours = GPT(config, TRITON_KERNELS).to(DEVICE, DTYPE)
    reference = GPT(config, REFERENCE_KERNELS).to(DEVICE, DTYPE)
    reference.load_state_dict(ours.state_dict())
    return ours, reference


def batch(t: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    idx = torch.randint(11, (3, t), generator=generator)
    targets = torch.randint(11, (3, t), generator=generator)
    targets[0, :4] = -100  # unscored positions, as a prompt-answer task has
    return idx.to(DEVICE), targets.to(DEVICE)


def test_the_set_is_listed_with_gpt_cores_sets_where_triton_is_installed():
    assert "triton" in list(KERNEL_SETS) and KERNEL_SETS["triton"] is TRITON_KERNELS
    assert TRITON_KERNELS.swapped() == list(KERNEL_SLOTS)  # every slot its own kernel


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_gpt_on_the_triton_set_gives_the_reference_sets_logits_loss_and_every_gradient(pos):
    ours, reference = pair(pos=pos)
    idx, targets = batch()
    out, ref = ours(idx, targets), reference(idx, targets)
    out.loss.backward()
    ref.loss.backward()
    assert (out.logits - ref.logits).abs().max() < TOLERANCE
    assert abs(out.loss.item() - ref.loss.item()) < TOLERANCE
    for (name, p), q in zip(ours.named_parameters(), reference.parameters(), strict=True):
        assert (p.grad - q.grad).abs().max() < TOLERANCE, name


def test_kv_cached_decoding_on_the_triton_set_gives_the_full_forwards_logits():
    ours, _ = pair()
    ours.eval()
    idx, _ = batch(10)
    with torch.no_grad():
        full = ours(idx).logits
        cache = ours.new_cache(idx.shape[0], idx.shape[1])
        steps = [ours(idx[:, :4], cache=cache).logits]
        steps += [ours(idx[:, t : t + 1], cache=cache).logits for t in range(4, 10)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < TOLERANCE


def test_a_model_with_dropout_trains_on_the_triton_set_and_evaluates_without_drawing():
    ours, reference = pair(dropout=0.2)
    idx, targets = batch()
    ours.train()
    loss = ours(idx, targets).loss
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in ours.parameters())
    ours.eval()
    reference.eval()
    with torch.no_grad():
        assert (ours(idx).logits - reference(idx).logits).abs().max() < TOLERANCE


def test_a_cpu_tensor_outside_the_interpreter_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        TRITON_KERNELS.gelu(torch.ones(3))


def test_a_hooked_pattern_is_the_triton_sets_own_weights_and_changes_nothing_it_does_not_replace():
    ours, reference = pair()
    idx, targets = batch()
    seen = []
    with ours.hooks({"blocks.0.pattern": lambda weights, name: seen.append(weights)}):
        hooked = ours(idx, targets)
    assert len(seen) == 1 and seen[0].shape == (3, 2, 9, 9)
    assert (hooked.logits - reference(idx, targets).logits).abs().max() < TOLERANCE


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_static_steps_on_the_triton_set_give_the_cached_steps_logits_and_tokens(pos):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=32, pos=pos)
    model = GPT(config, TRITON_KERNELS).to(DEVICE, DTYPE).eval()
    idx = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    decoder = StaticDecoder(model, 2, 8, graph=DEVICE == "cuda")
    cache = model.new_cache(2, 8)
    with torch.no_grad():
        assert (decoder.prefill(idx[:, :2]) - model(idx[:, :2], cache=cache).logits).abs().max() <= TOLERANCE
        for t in range(2, 8):
            static = decoder.step(idx[:, t : t + 1]).clone()
            assert (static - model(idx[:, t : t + 1], cache=cache).logits).abs().max() <= TOLERANCE
    prompt = idx[:, :2]
    assert torch.equal(generate(model, prompt, 6, 0.0, static=True), generate(model, prompt, 6, 0.0, static=False))


def test_a_bf16_autocast_step_on_the_triton_set_is_the_reference_sets_within_bf16_rounding():
    """Under autocast the kernels take what the products give: LayerNorm float32 activations with float32 weights,
    attention, GELU and dropout bf16 products, the loss bf16 logits. A bf16 run's first-step check on a GPU holds
    the triton set's step to the fast set's within 5e-2 (relative 2-norm, `gpt_train.compiling`); here both sets
    take the same autocast step (the interpreter rounds bf16 toward zero, a GPU to nearest)."""
    ours, reference = pair()
    ours, reference = ours.float(), reference.float()
    idx, targets = batch()
    steps = []
    for model in (ours, reference):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = model(idx, targets)
        out.loss.backward()
        assert (out.logits.dtype, out.loss.dtype) == (torch.bfloat16, torch.float32)
        steps.append((out.loss, [p.grad for p in model.parameters()]))
    (loss, grads), (ref_loss, ref_grads) = steps
    assert abs(loss.item() - ref_loss.item()) < 5e-2 * abs(ref_loss.item())
    for (name, _), g, r in zip(ours.named_parameters(), grads, ref_grads, strict=True):
        assert (g - r).norm() < 5e-2 * r.norm(), name


def saved_for_backward(model: GPT, idx: torch.Tensor, targets: torch.Tensor) -> int:
    """Bytes of the tensors a training forward keeps for its backward, the parameters left out, each storage once:
    most of a step's activation memory."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, targets)
    return sum(kept.values())


def test_a_training_forward_keeps_no_more_for_its_backward_than_pytorchs_own_kernels_but_the_losss_logsumexp():
    """PyTorch's twin: F.layer_norm, F.gelu, scaled_dot_product_attention (its flash kernel keeps q, k, v, the output
    and the log-sum-exp) and F.cross_entropy, as nanoGPT's model uses them. The fast set keeps more: the (T, T)
    weights of its attention, GELU's gate beside its input."""
    builtin = dataclasses.replace(
        REFERENCE_KERNELS,
        layer_norm=lambda x, weight, bias, eps: F.layer_norm(x, x.shape[-1:], weight, bias, eps),
        gelu=lambda x: F.gelu(x, approximate="tanh"),
        attention=lambda q, k, v, causal, dropout_p=0.0: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        cross_entropy=lambda logits, targets: F.cross_entropy(logits, targets, ignore_index=-100),
    )
    config = GPTConfig(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=64, bias=False)
    idx, targets = (torch.randint(65, (2, 64), generator=torch.Generator().manual_seed(s)) for s in (0, 1))
    kept = {}
    for name, kernels in (("triton", TRITON_KERNELS), ("builtin", builtin), ("fast", KERNEL_SETS["fast"])):
        torch.manual_seed(0)
        kept[name] = saved_for_backward(GPT(config, kernels).to(DEVICE).train(), idx.to(DEVICE), targets.to(DEVICE))
    lse = 4 * idx.numel()  # the loss's log-sum-exp, a float32 a position (F.cross_entropy keeps an (N, V) too)
    assert kept["triton"] <= kept["builtin"] + lse < kept["fast"], kept
