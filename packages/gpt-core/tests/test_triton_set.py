"""The triton kernel set as a whole: a GPT computed with it is the reference set's GPT, and it refuses where it
cannot run. Without a GPU the kernels run in Triton's interpreter, on CPU tensors, in float64."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels then run on the CPU
pytest.importorskip("triton")

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
