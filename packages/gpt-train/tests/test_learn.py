"""`gpt-train learn`: every step passes with its solution, every classic mistake is named, a correct kernel written
another way is not misdiagnosed, and a file that cannot be graded is one line naming the file and line."""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from learn_transcript import SOLUTIONS, answer, solved, write

from gpt_train.cli.learn import learn
from gpt_train.config import resolve_run_config
from gpt_train.learn.grader import grade
from gpt_train.learn.progress import record_pass, status
from gpt_train.learn.steps import BY_NAME, STEPS
from gpt_train.learn.training import finished_figure
from gpt_train.learn.zoo import OWN


def invoke(*args: str):
    return CliRunner().invoke(learn, [str(a) for a in args])


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


def test_the_course_page_counts_the_classic_mistakes_the_course_names():
    page = (Path(__file__).resolve().parents[3] / "docs" / "learn.md").read_text(encoding="utf-8")
    assert f"{sum(map(len, OWN.values()))} in all)" in page


def test_next_commands_name_a_folder_that_is_not_the_default(tmp_path):
    """Pasted without it, `learn check softmax` checked my-gpt/, not the folder just written."""
    folder = tmp_path / "fresh"
    assert invoke("start", "softmax", "--dir", folder).output.endswith(
        f"`gpt-train learn check softmax --dir {folder}`\n"
    )
    assert f"`gpt-train learn check softmax --dir {folder}`" in invoke("start", "softmax", "--dir", folder).output
    assert f"`gpt-train learn start gelu --dir {folder}`" in invoke("check", "gelu", "--dir", folder).output


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
        keys, queries = torch.arange(tk, device=q.device), torch.arange(tk - tq, tk, device=q.device)
        scores = torch.where(keys[None, :] > queries[:, None], float("-inf"), scores)
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
    for started in STEPS[: STEPS.index(BY_NAME[step]) + 1]:  # in order, as a learner starts them
        assert invoke("start", started.name, "--dir", tmp_path).exit_code == 0
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
        == f"{path} already exists: it is kept as it is; check it with `gpt-train learn check gelu --dir {tmp_path}`"
    )
    assert path.read_text() == "# my own work\n"


def test_start_writes_the_stub_with_the_slot_signature(tmp_path):
    assert invoke("start", "layer_norm", "--dir", tmp_path / "new").exit_code == 0
    text = (tmp_path / "new" / "layer_norm.py").read_text()
    assert "def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float)" in text
    assert "raise NotImplementedError" in text


@pytest.mark.parametrize(("step", "forward_step"), [("layer_norm_backward", "layer_norm"),
                                                  ("attention_backward", "attention")])  # fmt: skip
def test_a_backward_autograd_derived_is_refused(tmp_path, step, forward_step):
    shutil.copy(SOLUTIONS / BY_NAME[forward_step].file_name, tmp_path / BY_NAME[step].file_name)  # plain autograd
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
    assert listing[3].split()[:3] == ["[x]", "4.", "gelu"] and listing[3].endswith("(passed)")
    (tmp_path / "gelu.py").write_text((tmp_path / "gelu.py").read_text() + "\n# edited\n")
    assert invoke("list", "--dir", tmp_path).output.splitlines()[3].endswith("(not passed)")


def test_the_step_list_keeps_its_columns_past_step_nine(tmp_path):
    listing = invoke("list", "--dir", tmp_path).output.splitlines()
    rows = list(zip(listing, STEPS, strict=True))
    assert len({line.index(f" {step.name} ") for line, step in rows}) == 1  # every name starts in one column
    assert len({line.index(step.teaches) for line, step in rows}) == 1


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


@pytest.mark.parametrize(
    ("new", "said"),
    [
        ("digits + 1", "sequences() holds token 10; the vocabulary's ids are 0 to 9 (take a digit plus one modulo 10)"),
        ("(digits + 1.0) % 10", "sequences() returns torch.float32; token ids are an integer tensor (torch.long)"),
        (
            "((digits + 1) % 10)[:, :2]",
            "sequences() of 64 ids has shape (64, 6), not (64, 8) (prompt_length + answer_length tokens each)",
        ),
    ],
)
def test_a_tasks_sequences_outside_the_vocabulary_or_shape_are_named(tmp_path, new, said):
    """The stub's own suggestion, add one to each digit, was a bare `IndexError: index out of range in self`."""
    write(tmp_path, "task", (SOLUTIONS / "task.py").read_text().replace("(digits + 1) % 10", new))
    result = invoke("check", "task", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output == f"{tmp_path / 'task.py'}: {said}\n"


def test_train_without_a_passed_step_says_so(tmp_path):
    result = invoke("train", "--dir", tmp_path)
    assert result.exit_code == 2
    assert result.output == (
        f"gpt-train: error: no kernel step and no model step passed in {tmp_path} yet: see `gpt-train learn list`\n"
    )


def test_train_names_the_steps_it_leaves_to_gpt_core_because_they_are_not_passed(tmp_path, monkeypatch):
    """A passed step edited since (or one never passed) is not used, and training said nothing of it."""
    for step in ("softmax", "gelu"):
        assert invoke("check", step, "--dir", solved(tmp_path, step)).exit_code == 0
    write(tmp_path, "gelu", answer("gelu", ("0.044715 * x", "0.045 * x")))  # edited after its pass
    trained = []
    monkeypatch.setattr(
        "gpt_train.cli.learn.train_sort", lambda folder, kernels, *args: trained.append(kernels) or 1 / 0
    )
    result = CliRunner().invoke(learn, ["train", "--dir", str(tmp_path)])
    assert trained == [{"sampling_softmax": "softmax:softmax"}]
    said = "note: not passed (yet, or since an edit), so gpt-core's stand in: gelu; see "
    assert said + f"`gpt-train learn check gelu --dir {tmp_path}`" in result.output


def test_train_does_not_name_as_gpt_cores_the_modules_a_passed_model_imports(tmp_path, monkeypatch):
    """The model step graded the learner's block.py and multi_head_attention.py with it, and trains them: they are
    not "gpt-core's standing in", though their own steps are not passed."""
    for step in ("multi_head_attention", "block"):
        solved(tmp_path, step)
    assert invoke("check", "model", "--dir", solved(tmp_path, "model")).exit_code == 0
    monkeypatch.setattr("gpt_train.cli.learn.train_sort", lambda *args, **kwargs: 1 / 0)
    result = CliRunner().invoke(learn, ["train", "--dir", str(tmp_path)])
    assert "training sort on your GPT (model.py)" in result.output
    assert "stand in" not in result.output  # it said: "gpt-core's stand in: multi_head_attention, block"


def test_check_before_start_says_how_to_start(tmp_path):
    result = invoke("check", "gelu", "--dir", tmp_path)
    assert result.exit_code == 2
    said = f"no {tmp_path}/gelu.py: start it with `gpt-train learn start gelu --dir {tmp_path}`"
    assert result.output == f"gpt-train: error: {said}\n"


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


# the learner's code in a process of its own ------------------------------------------------------------------
SOFTMAX = "def softmax(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n    return e / e.sum(-1, keepdim=True)\n"
ENDS_THE_CHECK = {
    "a loop that never ends": (
        "def softmax(x):\n    i = 0\n    while i < x.shape[-1]:\n        pass\n",
        "the check took longer than 5 s and was stopped (a loop that never ends?)",
    ),
    "os._exit(0) in the kernel": (
        "import os\n\n\ndef softmax(x):\n    os._exit(0)\n",
        "the check ended without a verdict (exit status 0)",
    ),
    "an atexit hook exiting 0 after a failed check": (
        "import atexit, os\n\natexit.register(lambda: os._exit(0))\n\n\ndef softmax(x):\n    return x\n",
        "softmax: softmax: output [0, 4, 4] differs from torch.softmax",
    ),
    "a forged verdict written to stdout and exit 0": (
        'print(\'{"passed": true, "message": "softmax: passed"}\')\nimport sys\nsys.stdout.flush()\nimport os\n'
        "os._exit(0)\n",
        "the check ended without a verdict (exit status 0)",
    ),
}


@pytest.mark.parametrize(("source", "said"), ENDS_THE_CHECK.values(), ids=ENDS_THE_CHECK.keys())
def test_a_kernel_that_hangs_or_ends_the_process_fails_its_check_in_one_line(tmp_path, source, said):
    path = write(tmp_path, "softmax", source)
    began = time.monotonic()
    result = invoke("check", "softmax", "--dir", tmp_path, "--time-limit", 5 if "took longer" in said else 60)
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1 and said in result.output, result.output
    assert time.monotonic() - began < 60
    assert invoke("list", "--dir", tmp_path).output.splitlines()[0].endswith("(not passed)")
    assert path.is_file()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads whether a process runs from /proc")
def test_a_thread_or_process_the_kernel_leaves_running_neither_holds_the_check_nor_outlives_it(tmp_path):
    pid_file = tmp_path / "started"
    later = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(10**6)"
    source = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(10**6,)).start()\n"
        f"subprocess.Popen([sys.executable, '-c', {later!r}])\n" + SOFTMAX
    )
    write(tmp_path, "softmax", source)
    result = invoke("check", "softmax", "--dir", tmp_path, "--time-limit", 60)
    assert result.exit_code == 0 and result.output.startswith("softmax: passed"), result.output
    deadline = time.monotonic() + 20
    while not pid_file.is_file() and time.monotonic() < deadline:  # it may not have started when the check ended
        time.sleep(0.1)
    if not pid_file.is_file():
        return  # stopped before it wrote its number
    pid = int(pid_file.read_text())
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid)  # the process it started was stopped with the check


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads whether a process runs from /proc")
def test_sigterm_to_a_check_stops_the_grading_child_and_aborts_the_check(tmp_path):
    pid_file = tmp_path / "grading"
    source = (
        f"import os, pathlib\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n\n\n"
        "def softmax(x):\n    while True:\n        pass\n"
    )
    write(tmp_path, "softmax", source)
    command = [sys.executable, "-m", "gpt_train", "learn", "check", "softmax", "--dir", str(tmp_path),
               "--time-limit", "600"]  # fmt: skip
    check = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not pid_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.is_file(), check.communicate(timeout=5)
    time.sleep(0.5)  # the loop has begun
    check.send_signal(signal.SIGTERM)  # what `timeout` sends
    _, err = check.communicate(timeout=30)
    assert (check.returncode, err.decode().strip()) == (130, "gpt-train: aborted")  # as every command ends on it
    child = int(pid_file.read_text())
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(child)  # not left spinning in its own session


def _running(pid: int) -> bool:
    """Whether process `pid` is alive (a zombie waiting for its parent to reap it is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("edited", ["softmax", "helpers"])
def test_no_pass_is_recorded_when_the_file_or_a_module_it_imports_is_saved_during_the_check(tmp_path, edited):
    """The grading may have read either version: a model.py's pass was recorded for a block.py saved while it was
    graded, and `learn train` trained that block.py."""
    wrong = "def softmax(x):\n    return x\n" if edited == "softmax" else "SCALE = 2.0\n"
    saves = f"from pathlib import Path\nPath(__file__).write_text({wrong!r})  # saved while the check runs\n"
    write(tmp_path, "helpers", (saves if edited == "helpers" else "") + "SCALE = 1.0\n")
    source = (
        (saves if edited == "softmax" else "") + "from helpers import SCALE  # a module of the learner's\n" + SOFTMAX
    )
    write(tmp_path, "softmax", source)
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 0 and result.output.startswith("softmax: passed"), result.output
    assert "note: not recorded as passed: softmax.py or a module it imports changed during the check" in result.output
    assert invoke("list", "--dir", tmp_path).output.splitlines()[0].endswith("(not passed)")
    assert (tmp_path / f"{edited}.py").read_text() == wrong


def _record_at(folder: str, name: str, at: float) -> None:
    Path(folder, f"{name}.py").write_text(f"# {name}\n")
    while time.time() < at:
        pass
    record_pass(Path(folder), BY_NAME[name])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="starts the recording processes by fork")
def test_checks_ending_at_the_same_moment_all_keep_their_pass(tmp_path):
    context = multiprocessing.get_context("fork")
    names = ["softmax", "gelu", "layer_norm", "cross_entropy"]
    for _ in range(5):
        (tmp_path / ".learn.json").unlink(missing_ok=True)
        at = time.time() + 0.5
        processes = [context.Process(target=_record_at, args=(str(tmp_path), name, at)) for name in names]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        assert sorted(json.loads((tmp_path / ".learn.json").read_text())["passed"]) == sorted(names)


@pytest.mark.parametrize(
    "prefix",
    [b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n# caf\xe9\n"],
    ids=["a UTF-8 byte-order mark", "a latin-1 coding line"],
)
def test_a_file_python_imports_passes_with_a_byte_order_mark_or_a_coding_line(tmp_path, prefix):
    (tmp_path / "softmax.py").write_bytes(prefix + SOFTMAX.encode())
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 0 and result.output.startswith("softmax: passed"), result.output


def test_a_nul_byte_is_one_line_naming_its_line(tmp_path):
    path = tmp_path / "softmax.py"
    path.write_bytes(SOFTMAX.encode() + b"# \x00\n")
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip() == f"{path}:4: a NUL byte (\\x00): a Python file holds text; save it again as text"


ODD = {
    "an exception whose str() raises": (
        "class Odd(Exception):\n    def __str__(self):\n        raise ValueError('no message')\n\n\n"
        "def softmax(x):\n    raise Odd()\n",
        "{path}:7: softmax raised Odd",
    ),
    "a SystemExit whose code's repr raises": (
        "import sys\n\n\nclass Code:\n    def __repr__(self):\n        raise ValueError\n\n\n"
        "def softmax(x):\n    sys.exit(Code())\n",
        "{path}:10: softmax raised SystemExit(): sys.exit ends the program",
    ),
    "autograd switched off at import": (
        "import torch\n\ntorch.set_grad_enabled(False)\n" + SOFTMAX,
        "{path}: importing it switched autograd off",
    ),
    "autograd switched off by the kernel": (
        "import torch\n\n\ndef softmax(x):\n    torch.set_grad_enabled(False)\n    return x.softmax(-1)\n",
        "{path}: softmax raised RuntimeError: it switched autograd off",
    ),
}


@pytest.mark.parametrize(("source", "said"), ODD.values(), ids=ODD.keys())
def test_odd_exceptions_and_autograd_switched_off_are_one_line(tmp_path, source, said):
    path = write(tmp_path, "softmax", source)
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 1, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(said.format(path=path))


def test_a_step_file_that_is_not_a_file_is_one_line(tmp_path):
    (tmp_path / "softmax.py").mkdir()
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 2
    assert result.output == (
        f"gpt-train: error: {tmp_path}/softmax.py is not a file (a folder, a device or a pipe): the check grades a "
        "Python file\n"
    )


def test_the_check_of_a_task_file_runs_in_its_own_process_too(tmp_path):
    write(tmp_path, "task", "import os\nos._exit(0)\n")
    result = invoke("check", "task", "--dir", tmp_path)
    assert result.exit_code == 1 and "the check ended without a verdict" in result.output


@pytest.mark.parametrize(
    "final",
    ["[]", '{"heldout_exact_match": "0.9", "heldout_examples": 10}',
     '{"heldout_exact_match": 0.9, "heldout_examples": [1]}', '{"heldout_exact_match": NaN, "heldout_examples": 10}',
     '{"heldout_exact_match": 0.9, "heldout_examples": 0.5}'],
    ids=["a list", "a number as text", "a list of examples", "NaN", "half an example"],
)  # fmt: skip
def test_a_damaged_gpt_core_run_is_trained_again_not_read(tmp_path, final):
    resolve_run_config("sort", {})[0].save(tmp_path)  # gpt-core's run, as `learn train` makes it
    (tmp_path / "final.json").write_text('{"heldout_exact_match": 0.9, "heldout_examples": 10}')
    assert finished_figure(tmp_path) is not None
    (tmp_path / "final.json").write_text(final)
    assert finished_figure(tmp_path) is None


def test_a_finished_run_of_another_configuration_is_not_taken_for_gpt_cores(tmp_path):
    """A one-layer 20-step run in runs/gpt-core was set beside the learner's as "the same run, same seed"."""
    resolve_run_config("sort", {"n_layer": 1, "steps": 20})[0].save(tmp_path)
    (tmp_path / "final.json").write_text('{"heldout_exact_match": 0.0, "heldout_examples": 250050}')
    assert finished_figure(tmp_path) is None


@pytest.mark.parametrize("record", ['{"passed": [1, 2]}', '{"passed": {"gelu": 3}}', "[]", "not json"])
def test_a_damaged_progress_record_is_read_as_no_passes_and_written_anew(tmp_path, record):
    (tmp_path / ".learn.json").write_text(record)
    write(tmp_path, "softmax", SOFTMAX)
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert list(json.loads((tmp_path / ".learn.json").read_text())["passed"]) == ["softmax"]


@pytest.mark.parametrize("limit", ["nan", "inf", "1e308", "0", "-1"])
def test_a_time_limit_that_is_not_a_number_of_seconds_is_one_line(cli, tmp_path, limit):
    write(tmp_path, "softmax", SOFTMAX)
    result = cli("learn", "check", "softmax", "--dir", tmp_path, "--time-limit", limit)
    assert result.code == 2 and result.err.startswith("gpt-train: error: Invalid value for '--time-limit'")
    assert len(result.err.splitlines()) == 1 and "Traceback" not in result.err


def test_a_kernel_raising_keyboard_interrupt_fails_its_check_in_one_line(tmp_path):
    path = write(tmp_path, "softmax", "def softmax(x):\n    raise KeyboardInterrupt\n")
    result = invoke("check", "softmax", "--dir", tmp_path)
    assert result.exit_code == 1
    said = "raised KeyboardInterrupt (Ctrl-C's exception); a kernel fails by raising an ordinary exception"
    assert result.output == f"{path}: the code in it {said}\n"


def test_an_edit_to_a_file_a_passed_step_imports_unchecks_that_step(tmp_path):
    """model.py imports block.py: a post-norm block saved after model passed left model "passed", and `learn
    train` trained on the broken block."""
    solved(tmp_path, "model")  # model.py beside the answers of the steps it imports
    assert invoke("check", "model", "--dir", tmp_path).exit_code == 0
    assert status(tmp_path, BY_NAME["model"]) == "passed"
    block = tmp_path / "block.py"
    block.write_text(block.read_text().replace("x = x + self.attn(self.ln1(x))", "x = self.ln1(x + self.attn(x))"))
    assert status(tmp_path, BY_NAME["model"]) == "not passed"
    assert invoke("check", "model", "--dir", tmp_path).exit_code == 1  # graded with the block it imports


def test_an_edit_to_a_helper_module_of_the_learners_unchecks_the_step_that_imports_it(tmp_path):
    source = answer("softmax")
    assert "exp = (x - x.amax(dim=-1, keepdim=True)).exp()" in source
    (tmp_path / "helpers.py").write_text("def shifted(x):\n    return x - x.amax(dim=-1, keepdim=True)\n")
    write(tmp_path, "softmax", "from helpers import shifted\n" + source.replace(
        "(x - x.amax(dim=-1, keepdim=True)).exp()", "shifted(x).exp()"))  # fmt: skip
    assert invoke("check", "softmax", "--dir", tmp_path).exit_code == 0
    (tmp_path / "helpers.py").write_text("def shifted(x):\n    return x - x.amax()\n")
    assert status(tmp_path, BY_NAME["softmax"]) == "not passed"


def test_a_check_stopped_by_its_time_limit_keeps_the_files_pass(tmp_path):
    """The limit includes the child's start: a correct softmax stopped at 0.01 s is not judged wrong."""
    solved(tmp_path, "softmax")
    assert invoke("check", "softmax", "--dir", tmp_path).exit_code == 0
    stopped = invoke("check", "softmax", "--dir", tmp_path, "--time-limit", "0.01")
    assert stopped.exit_code == 1 and "took longer than 0.01 s" in stopped.output
    assert status(tmp_path, BY_NAME["softmax"]) == "passed"


def test_a_module_not_found_says_where_an_import_of_a_file_beside_it_goes():
    """`from softmax import softmax` inside a function ran after the folder left the import path."""
    from gpt_train.learn.loading import describe

    said = describe(ModuleNotFoundError("No module named 'softmax'", name="softmax"))
    assert said.startswith("ModuleNotFoundError: No module named 'softmax' (a module beside your file is found by")


@pytest.mark.parametrize(
    ("step", "after", "said"),
    [
        ("generation", "    return out\n", "your generate changed its argument idx in place (greedy (temperature 0))"),
        ("training_step", "    return loss.detach()\n", "your training_step changed its argument inputs in place"),
    ],
)
def test_a_step_that_changes_the_callers_tensors_in_place_fails_naming_the_argument(tmp_path, step, after, said):
    """The kernels' checks fail such code; these two passed it (the prompt zeroed after generating from it)."""
    change = "    idx.zero_()\n" if step == "generation" else "    inputs.fill_(0)\n"
    source = (SOLUTIONS / f"{step}.py").read_text()
    assert after in source
    write(tmp_path, step, source.replace(after, change + after, 1))
    result = invoke("check", step, "--dir", tmp_path)
    assert result.exit_code == 1 and result.output.startswith(f"{step}: {said}"), result.output
