"""The run's AdamW: PyTorch's fused kernel called directly, the same bits as torch.optim.AdamW(fused=True),
resuming from either's state_dict, and a training step that never imports the compiler."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from gpt_core import GPT, GPTConfig
from gpt_train.optimisation import FusedAdamW, learning_rate, make_optimizer
from gpt_train.settings import TrainSettings

SETTINGS = TrainSettings(steps=12, batch_size=4, lr=3e-3, min_lr=3e-4, warmup_steps=3, weight_decay=0.5,
                         beta1=0.9, beta2=0.98)  # fmt: skip


def model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))


def torch_adamw(m: GPT) -> torch.optim.AdamW:
    """torch.optim's fused AdamW over the same two groups as the run's."""
    ours = make_optimizer(m, SETTINGS).param_groups
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in ours]
    return torch.optim.AdamW(groups, lr=SETTINGS.lr, betas=(SETTINGS.beta1, SETTINGS.beta2), fused=True)


def train(m: GPT, optimizer, steps: range) -> None:
    """Steps on fixed batches with the run's schedule; the last layer's head left without a gradient on odd
    steps, as a parameter the loss does not reach."""
    for step in steps:
        gen = torch.Generator().manual_seed(step)
        ids = torch.randint(0, 11, (4, 8), generator=gen)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, SETTINGS)
        optimizer.zero_grad()
        m(ids[:, :-1], ids[:, 1:]).loss.backward()
        if step % 2:
            m.lm_head.weight.grad = None
        optimizer.step()


def same_weights(a: GPT, b: GPT) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_the_run_optimiser_is_the_fused_kernel_on_cpu():
    assert isinstance(make_optimizer(model(), SETTINGS), FusedAdamW)


def test_it_takes_the_very_steps_of_torch_optim_fused_adamw():
    ours, theirs = model(), model()
    train(ours, make_optimizer(ours, SETTINGS), range(12))
    train(theirs, torch_adamw(theirs), range(12))
    assert same_weights(ours, theirs)
    assert not same_weights(ours, model())  # it trained


def test_under_fp16_loss_scaling_it_takes_torch_optim_fused_adamws_steps_and_skips_the_same_one():
    """GradScaler hands both optimisers its verdict on the device; step 5's nan gradient is skipped by both (weights
    and step counts unchanged), and the scale halves."""
    runs = {}
    for name, make in (("ours", lambda m: make_optimizer(m, SETTINGS)), ("torch", torch_adamw)):
        m = model()
        optimizer, scaler = make(m), torch.amp.GradScaler("cpu", init_scale=2.0**8)
        weights = []
        for step in range(8):
            ids = torch.randint(0, 11, (4, 8), generator=torch.Generator().manual_seed(step))
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = m(ids[:, :-1], ids[:, 1:]).loss
            scaler.scale(loss * (math.nan if step == 5 else 1.0)).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            weights.append([p.detach().clone() for p in m.parameters()])
        steps = [state["step"].item() for state in optimizer.state.values()]
        runs[name] = weights, steps, scaler.get_scale()
    (ours, our_steps, our_scale), (theirs, their_steps, their_scale) = runs["ours"], runs["torch"]
    assert all(torch.equal(a, b) for step in range(8) for a, b in zip(ours[step], theirs[step], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(ours[5], ours[4], strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(ours[6], ours[5], strict=True))
    assert our_steps == their_steps == [7.0] * len(our_steps) and our_scale == their_scale == 2.0**7


@pytest.mark.parametrize("writer", ["ours", "torch"])
def test_a_resumed_state_dict_gives_the_bits_of_the_uninterrupted_run(writer):
    """A checkpoint's optimiser state, written by this optimiser or by torch.optim (as runs before it wrote
    them), resumes to the weights of the uninterrupted run."""
    make = {"ours": lambda m: make_optimizer(m, SETTINGS), "torch": torch_adamw}[writer]
    straight = model()
    train(straight, make_optimizer(straight, SETTINGS), range(12))
    resumed = model()
    before = make(resumed)
    train(resumed, before, range(6))
    after = make_optimizer(resumed, SETTINGS)
    after.load_state_dict(before.state_dict())
    train(resumed, after, range(6, 12))
    assert same_weights(resumed, straight)


def test_a_state_dict_of_another_model_is_refused():
    small, other = model(), GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    saved = make_optimizer(other, SETTINGS).state_dict()
    with pytest.raises(ValueError, match="parameter groups hold"):
        make_optimizer(small, SETTINGS).load_state_dict(saved)


def test_a_training_step_never_imports_the_compiler():
    """torch.optim's methods import torch._dynamo on first use, more than a second of start-up."""
    code = (
        "import sys, torch\n"
        "from gpt_core import GPT, GPTConfig\n"
        "from gpt_train.settings import TrainSettings\n"
        "from gpt_train.optimisation import make_optimizer\n"
        "m = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))\n"
        "o = make_optimizer(m, TrainSettings(steps=1, batch_size=2, lr=1e-3))\n"
        "ids = torch.randint(0, 11, (2, 8)); o.zero_grad(); m(ids[:, :-1], ids[:, 1:]).loss.backward(); o.step()\n"
        "o.load_state_dict(o.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
