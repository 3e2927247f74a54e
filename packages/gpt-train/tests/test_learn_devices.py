"""`gpt-train learn check` refuses code that is right on the CPU and fails on a GPU: a tensor made without device=
(or kept in a plain module attribute, which model.to(device) leaves behind) meeting the inputs, which `learn train
--device cuda` puts on the GPU. It finds it on a machine with no GPU, with the inputs on PyTorch's meta device; a
right answer in any style still passes, one that reads values (which meta tensors lack) included."""

from __future__ import annotations

import pytest
import torch
from learn_transcript import checked, write

from gpt_train.learn.devices import DeviceWatch, Origin, made_on_cpu, on_device
from gpt_train.learn.grader import check_file, grade
from gpt_train.learn.steps import BY_NAME

ATTENTION_ON_CPU = """import torch


def attention(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        tq, tk = scores.shape[-2:]
        allowed = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
        scores = scores.masked_fill(~allowed, float("-inf"))
    exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True) @ v
"""


def test_an_attention_making_its_mask_on_the_cpu_is_refused_naming_the_line(tmp_path):
    """It passes every float64 and float32 check on the CPU, and stopped `learn train --device cuda` at its first
    step with a device mismatch."""
    path = write(tmp_path, "attention", ATTENTION_ON_CPU)
    verdict = check_file(BY_NAME["attention"], path)
    assert not verdict.passed
    first, made = verdict.message.splitlines()
    assert first == f"attention: {made_on_cpu(BY_NAME['attention'], Origin('torch.ones'))}"
    assert "creates a tensor on the CPU (torch.ones without device=)" in first
    assert first.endswith("make it on the inputs' device, device=q.device")
    assert made == f"  made at {path}:8"


def test_a_mask_made_in_a_handwritten_backward_on_the_cpu_is_refused(tmp_path):
    """The forward keeps to q's device; the backward, which runs on the GPU too, does not."""
    verdict = checked(
        tmp_path,
        "attention_backward",
        ("            allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device)",
         "            allowed = torch.ones(n_queries, n_keys, dtype=torch.bool)"),
    )  # fmt: skip
    assert not verdict.passed
    assert "your attention creates a tensor on the CPU (torch.ones without device=)" in verdict.message


def test_positions_made_on_the_cpu_are_refused_in_the_model_step(tmp_path):
    verdict = checked(tmp_path, "model", ("wpe(torch.arange(T, device=idx.device))", "wpe(torch.arange(T))"))
    assert not verdict.passed
    first, made = verdict.message.splitlines()
    assert first == f"model: {made_on_cpu(BY_NAME['model'], Origin('torch.arange'))}"
    assert first.endswith("device=idx.device")
    assert made.startswith(f"  made at {tmp_path / 'model.py'}:")


def test_a_tensor_kept_in_a_plain_attribute_is_refused_and_a_buffer_passes(tmp_path):
    """model.to(device) moves parameters and buffers; an attribute that is a plain tensor stays on the CPU."""
    kept = (
        ("self.wpe = nn.Embedding(block_size, n_embd)\n",
         "self.wpe = nn.Embedding(block_size, n_embd)\n        self.positions = torch.arange(block_size)\n"),
        ("self.wpe(torch.arange(T, device=idx.device))", "self.wpe(self.positions[:T])"),
    )  # fmt: skip
    verdict = checked(tmp_path, "model", *kept)
    assert not verdict.passed
    assert verdict.message.splitlines()[0].startswith(
        "model: your GPT keeps self.positions, a plain tensor attribute that model.to(device) leaves on the CPU"
    )
    assert verdict.message.splitlines()[0].endswith(
        'self.register_buffer("positions", ...), which moves with the model'
    )
    registered = (kept[0][0], kept[0][0] + '        self.register_buffer("positions", torch.arange(block_size))\n')
    assert checked(tmp_path / "registered", "model", registered, kept[1]).passed


def _attention_in_other_styles(q, k, v, causal):
    """Every tensor it makes takes the inputs' device its own way: new_ones, a move with .to(q), a 0-dim CPU scale
    (a number to CUDA), CPU indices into a device tensor."""
    scale = torch.tensor(float(q.shape[-1]), dtype=q.dtype).rsqrt()
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        tq, tk = scores.shape[-2:]
        future = torch.arange(tk)[None, :] > torch.arange(tk - tq, tk)[:, None]  # made on the CPU, then moved
        scores = scores.masked_fill(future.to(q.device), float("-inf"))
        keep = q.new_ones(tq, tk, dtype=torch.bool).tril(tk - tq)  # the same mask again, made on q's device
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = (scores - scores.logsumexp(dim=-1, keepdim=True)).exp()
    return probs[..., torch.arange(probs.shape[-2]), :] @ v


def _softmax_reading_values(x):
    """It reads values (a meta tensor has none): the device check ends there without a verdict."""
    shifted = x - x.amax(dim=-1, keepdim=True)
    if bool((shifted > 0).any()):
        raise ValueError("a row's max is not its max")
    exp = shifted.exp()
    return exp / exp.sum(dim=-1, keepdim=True)


def _cross_entropy_by_boolean_mask(logits, targets):
    """Rows picked by a boolean mask and by arange made on logits' device: the device check runs past the mask."""
    scored = targets != -100
    logits, targets = logits[scored], targets[scored]
    picked = logits[torch.arange(len(targets), device=logits.device), targets]
    m = logits.amax(dim=-1, keepdim=True)
    return (m.squeeze(-1) + (logits - m).exp().sum(dim=-1).log() - picked).mean()


def _layer_norm_with_scalars(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).square().mean(dim=-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + torch.tensor(eps, dtype=x.dtype)) * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize(
    ("step", "kernel"),
    [
        ("attention", _attention_in_other_styles),
        ("softmax", _softmax_reading_values),
        ("cross_entropy", _cross_entropy_by_boolean_mask),
        ("layer_norm", _layer_norm_with_scalars),
    ],
)
def test_a_right_answer_keeping_to_the_inputs_device_in_another_style_passes(step, kernel):
    verdict = grade(BY_NAME[step], kernel)
    assert verdict.passed, verdict.message


def test_a_cross_entropy_making_a_cpu_tensor_after_its_boolean_mask_is_refused():
    """A meta tensor has no values to count a mask's positions by: the check takes every one and runs on."""

    def cross_entropy(logits, targets):
        scored = targets != -100
        logits, targets = logits[scored], targets[scored]
        chosen = torch.arange(logits.shape[-1])[None, :] == targets[:, None]
        m = logits.amax(dim=-1, keepdim=True)
        return (m.squeeze(-1) + (logits - m).exp().sum(dim=-1).log() - (logits * chosen).sum(dim=-1)).mean()

    verdict = grade(BY_NAME["cross_entropy"], cross_entropy)
    assert verdict.message == f"cross_entropy: {made_on_cpu(BY_NAME['cross_entropy'], Origin('torch.arange'))}"


def test_a_wrong_answer_is_named_by_its_values_before_its_device():
    """The scale is wrong and the mask is on the CPU: the values come first, as on a GPU they never get a chance."""
    source = ATTENTION_ON_CPU.replace("q.shape[-1] ** 0.5", "q.shape[-1]")
    namespace: dict = {}
    exec(compile(source, "attention.py", "exec"), namespace)
    verdict = grade(BY_NAME["attention"], namespace["attention"])
    assert verdict.message.splitlines()[0] == "attention: your scores are divided by d, not sqrt(d)"


def _mismatched(code) -> bool:
    watch = DeviceWatch(lambda file: False)
    x = on_device(torch.randn(4, 8))
    try:
        with watch:
            code(x)
    except Exception:
        pass
    return watch.mismatched


@pytest.mark.parametrize(
    ("code", "cuda_refuses"),
    [
        (lambda x: x.index_put_((torch.arange(2),), torch.ones(2, 8)), True),  # values put from the CPU
        (lambda x: x.index_select(0, torch.tensor(1)), True),  # a 0-dim index: index_select checks every device
        (lambda x: x.gather(1, torch.zeros(4, 1, dtype=torch.long)), True),
        (lambda x: x[torch.arange(2)], False),  # CPU indices, which CUDA moves
        (lambda x: x.index_put_((torch.arange(2),), torch.tensor(1.0)), False),  # a 0-dim value: a number
        (lambda x: x * torch.tensor(2.0), False),
    ],
    ids=[
        "index_put-cpu-values",
        "index_select-0-dim-index",
        "gather-cpu-index",
        "cpu-indices",
        "0-dim-value",
        "0-dim-factor",
    ],  # fmt: skip
)
def test_a_cpu_tensor_beside_the_inputs_is_refused_where_cuda_refuses_it(code, cuda_refuses):
    """CUDA takes CPU indices into a device tensor and a 0-dim CPU tensor as a number, but not values put from the
    CPU, nor a 0-dim index for an operator that checks every tensor's device."""
    assert _mismatched(code) == cuda_refuses
