"""`gpt-train learn`: every step passes with its solution, every classic mistake is named, a correct kernel written
another way is not misdiagnosed, and a file that cannot be graded is one line naming the file and line."""

from __future__ import annotations

import functools
import math
import shutil
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gpt_train.cli.learn import learn
from gpt_train.learn.grader import grade
from gpt_train.learn.steps import BY_NAME, STEPS
from gpt_train.learn.zoo import OWN

SOLUTIONS = Path(str(files("gpt_train.learn.solutions")))


def invoke(*args: str):
    return CliRunner().invoke(learn, [str(a) for a in args])


def solved(folder: Path, *steps: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in steps:
        shutil.copy(SOLUTIONS / BY_NAME[name].file_name, folder / BY_NAME[name].file_name)
    return folder


def write(folder: Path, step: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / BY_NAME[step].file_name
    path.write_text(text)
    return path


@pytest.mark.parametrize("step", [step.name for step in STEPS])
def test_every_step_passes_with_its_solution(tmp_path, step):
    result = invoke("check", step, "--dir", solved(tmp_path, step))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{step}: passed")
    assert len(result.output.splitlines()) == 1
    assert invoke("list", "--dir", tmp_path).output.count("(passed)") == 1


MISTAKES = [
    pytest.param(step, mistake, variant, id=f"{step}-{mistake.key}-{i}")
    for step, mistakes in OWN.items()
    for mistake in mistakes
    for i, variant in enumerate(mistake.kernels)
]


@pytest.mark.parametrize(("step", "mistake", "variant"), MISTAKES)
def test_every_classic_mistake_is_named(step, mistake, variant):
    kernel = functools.partial(variant, tile=64) if mistake.tiled else variant
    verdict = grade(BY_NAME[step], kernel)
    assert not verdict.passed
    assert verdict.message.splitlines()[0] == f"{step}: {mistake.message}"


def test_a_mistake_written_in_another_order_is_still_named(tmp_path):
    """The learner's 1/d attention scales q before the product and masks with an additive bias."""
    write(
        tmp_path,
        "attention",
        """import torch


def attention(q, k, v, causal):
    q = q / q.shape[-1]
    scores = q @ k.transpose(-2, -1)
    if causal:
        tq, tk = scores.shape[-2:]
        scores = scores + torch.full((tq, tk), float("-inf")).triu(tk - tq + 1)
    return torch.softmax(scores, dim=-1) @ v
""",
    )
    result = invoke("check", "attention", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == "attention: your scores are divided by d, not sqrt(d)"
    assert "first difference: sdpa causal: output" in result.output


def _attention_reordered(q, k, v, causal):
    """Scale on k, mask by torch.where, softmax by exp minus logsumexp."""
    scores = q @ (k / math.sqrt(k.shape[-1])).transpose(-2, -1)
    if causal:
        tq, tk = scores.shape[-2:]
        future = torch.arange(tk)[None, :] > torch.arange(tk - tq, tk)[:, None]
        scores = torch.where(future, float("-inf"), scores)
    return (scores - scores.logsumexp(dim=-1, keepdim=True)).exp() @ v


def _layer_norm_reordered(x, weight, bias, eps):
    """var = E[x^2] - E[x]^2 and the weight folded into the scale."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
    y = (x - mean) * (weight / torch.sqrt(var + eps))
    return y if bias is None else bias + y


def _gelu_by_sigmoid(x):
    """0.5 (1 + tanh(u)) = sigmoid(2u)."""
    return x * torch.sigmoid(2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))


def _cross_entropy_by_log_softmax(logits, targets):
    scored = targets != -100
    logp = logits - logits.logsumexp(dim=-1, keepdim=True)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * scored).sum() / scored.sum()


def _softmax_by_division(x):
    shifted = (x - x.max(dim=-1, keepdim=True).values).exp()
    return shifted * (1.0 / shifted.sum(dim=-1, keepdim=True))


@pytest.mark.parametrize(
    ("step", "kernel"),
    [
        ("attention", _attention_reordered),
        ("layer_norm", _layer_norm_reordered),
        ("gelu", _gelu_by_sigmoid),
        ("cross_entropy", _cross_entropy_by_log_softmax),
        ("softmax", _softmax_by_division),
    ],
)
def test_a_correct_kernel_computed_in_another_order_passes(step, kernel):
    verdict = grade(BY_NAME[step], kernel)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize("step", [step.name for step in STEPS])
def test_an_unedited_stub_is_one_line_naming_the_file_and_line(tmp_path, step):
    assert invoke("start", step, "--dir", tmp_path).exit_code == 0
    result = invoke("check", step, "--dir", tmp_path)
    assert result.exit_code == 1
    path = tmp_path / BY_NAME[step].file_name
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "raise NotImplementedError" in text)
    assert result.output.splitlines() == [result.output.strip()]
    assert result.output.startswith(f"{path}:{line}: ")
    assert "not written yet" in result.output


BROKEN = {
    "a syntax error": ("def softmax(x):\n    return x.exp( / 2\n", 2, "syntax error"),
    "a wrong signature": ("def softmax(x, dim):\n    return x\n", 1,
                          "has the wrong signature; the slot calls softmax(x)"),
    "an exception inside it": ("def softmax(x):\n    y = x.exp()\n    return y @ y.unsqueeze(0)\n", 3,
                               "softmax raised RuntimeError"),
    "sys.exit inside it": ("import sys\n\n\ndef softmax(x):\n    sys.exit(3)\n", 5, "softmax raised SystemExit(3)"),
    "sys.exit while importing": ("import sys\n\nsys.exit('bye')\n", 3, "importing it raised SystemExit('bye')"),
    "an exception while importing": ("import torch\n\nTILE = 1 / 0\n", 3, "importing it raised ZeroDivisionError"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(BROKEN))
def test_a_broken_file_is_one_line_naming_the_file_and_line(tmp_path, what):
    source, line, said = BROKEN[what]
    path = write(tmp_path, "softmax", source)
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 1
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"{path}:{line}: ")
    assert said in result.output


def test_a_missing_function_is_named(tmp_path):
    path = write(tmp_path, "gelu", "def gelu_tanh(x):\n    return x\n")
    result = invoke("check", "gelu", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip() == f"{path}: no function `gelu` (the slot calls gelu(x))"


def test_start_never_overwrites_the_learners_file(tmp_path):
    path = write(tmp_path, "gelu", "# my own work\n")
    result = invoke("start", "gelu", "--dir", tmp_path)
    assert result.exit_code == 0
    assert (
        result.output.strip()
        == f"{path} already exists: it is kept as it is; check it with `gpt-train learn check gelu`"
    )
    assert path.read_text() == "# my own work\n"


def test_start_writes_the_stub_with_the_slot_signature(tmp_path):
    assert invoke("start", "layer_norm", "--dir", tmp_path / "new").exit_code == 0
    text = (tmp_path / "new" / "layer_norm.py").read_text()
    assert "def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float)" in text
    assert "raise NotImplementedError" in text


@pytest.mark.parametrize(("step", "slot"), [("layer_norm_backward", "layer_norm"), ("attention_backward", "attention")])
def test_a_backward_autograd_derived_is_refused(tmp_path, step, slot):
    write(tmp_path, step, f"from gpt_core.reference import {slot}\n\n__all__ = ['{slot}']\n")
    result = invoke("check", step, "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.startswith(f"{step}: autograd derived this backward")


def test_flash_attention_that_forms_the_t_by_t_scores_is_refused(tmp_path):
    shutil.copy(SOLUTIONS / "attention.py", tmp_path / "flash_attention.py")
    result = invoke("check", "flash_attention", "--dir", tmp_path)
    assert result.exit_code == 1
    assert "the forward made a tensor of 262,144 elements at T = 512" in result.output


def test_a_pass_is_forgotten_when_the_file_changes(tmp_path):
    solved(tmp_path, "gelu")
    assert invoke("check", "gelu", "--dir", tmp_path).exit_code == 0
    listing = invoke("list", "--dir", tmp_path).output.splitlines()
    assert listing[3].startswith("[x] 4. gelu") and listing[3].endswith("(passed)")
    (tmp_path / "gelu.py").write_text((tmp_path / "gelu.py").read_text() + "\n# edited\n")
    assert invoke("list", "--dir", tmp_path).output.splitlines()[3].endswith("(not passed)")


def test_learn_alone_lists_the_steps_in_order(tmp_path):
    result = invoke()
    assert result.exit_code == 0
    assert [line.split(". ")[1].split()[0] for line in result.output.splitlines()] == [step.name for step in STEPS]


def test_a_task_that_cannot_be_learned_fails(tmp_path):
    source = (SOLUTIONS / "task.py").read_text().replace("(digits + 1) % 10", "torch.randint(10, digits.shape)")
    write(tmp_path, "task", source)
    result = invoke("check", "task", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.startswith("task: shift does not train")


def test_train_without_a_passed_step_says_so(tmp_path):
    result = invoke("train", "--dir", tmp_path)
    assert result.exit_code == 2
    assert result.output == f"gpt-train: error: no kernel step passed in {tmp_path} yet: see `gpt-train learn list`\n"


def test_check_before_start_says_how_to_start(tmp_path):
    result = invoke("check", "gelu", "--dir", tmp_path)
    assert result.exit_code == 2
    assert result.output == f"gpt-train: error: no {tmp_path}/gelu.py: start it with `gpt-train learn start gelu`\n"


class _LayerNormSummed(torch.autograd.Function):
    """LayerNorm's backward from row sums instead of means: dx = rstd / C (C g - sum(g) - xhat sum(g xhat))."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        centred = x - x.mean(dim=-1, keepdim=True)
        rstd = 1.0 / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
        xhat = centred * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.has_bias = bias is not None
        return xhat * weight + (bias if bias is not None else 0.0)

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, weight = ctx.saved_tensors
        width = dy.shape[-1]
        g = dy * weight
        dx = (width * g - g.sum(dim=-1, keepdim=True) - xhat * (g * xhat).sum(dim=-1, keepdim=True)) * rstd / width
        dweight = (dy * xhat).flatten(0, -2).sum(dim=0)
        return dx, dweight, dy.flatten(0, -2).sum(dim=0) if ctx.has_bias else None, None


def test_a_hand_written_backward_in_another_order_passes():
    verdict = grade(BY_NAME["layer_norm_backward"], lambda x, w, b, eps: _LayerNormSummed.apply(x, w, b, eps))
    assert verdict.passed, verdict.message


def test_flash_attention_passes_at_another_tile_size(tmp_path):
    source = (SOLUTIONS / "flash_attention.py").read_text().replace("TILE = 64", "TILE = 16")
    write(tmp_path, "flash_attention", source)
    result = invoke("check", "flash_attention", "--dir", tmp_path)
    assert result.exit_code == 0, result.output


def test_a_flash_mistake_is_named_at_the_learners_tile_size(tmp_path):
    """The running sum left unscaled, in tiles of 32: the zoo's kernel must tile as the learner's does to agree."""
    source = (SOLUTIONS / "flash_attention.py").read_text().replace("TILE = 64", "TILE = 32")
    source = source.replace("running_sum = running_sum * rescale +", "running_sum = running_sum +")
    write(tmp_path, "flash_attention", source)
    result = invoke("check", "flash_attention", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        "flash_attention: the running sum is not rescaled by exp(m_old - m_new) when the max grows"
    )


def test_through_gpt_train_a_failing_check_prints_its_verdict_alone_and_exits_1(cli, tmp_path):
    """The command group reads a SystemExit as a plugin exiting; a failed check must not look like one."""
    assert cli("learn", "start", "gelu", "--dir", tmp_path).code == 0
    result = cli("learn", "check", "gelu", "--dir", tmp_path)
    assert result.code == 1
    assert "gelu is not written yet" in result.out and result.err == ""


@pytest.mark.parametrize(
    ("returns", "said"),
    [
        (".detach().to('meta')", "its output is on device meta, not cpu"),
        (".to_sparse()", "its output is a sparse tensor (torch.sparse_coo)"),
    ],
    ids=["on another device", "sparse"],
)
def test_a_kernel_whose_output_is_not_a_dense_tensor_on_its_inputs_device_is_one_line(tmp_path, returns, said):
    body = "    e = (x - x.amax(-1, keepdim=True)).exp()\n"
    source = f"def softmax(x):\n{body}    return (e / e.sum(-1, keepdim=True)){returns}\n"
    path = write(tmp_path, "softmax", source)
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.output.strip().splitlines() == [f"{path}: softmax raised TypeError: {said}; a kernel returns a "
                                                  "dense torch.Tensor on its inputs' device"]  # fmt: skip
