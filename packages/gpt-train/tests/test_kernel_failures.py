"""A chosen kernel that fails in a way the verification table cannot show: one that calls sys.exit is
that kernel's failure, never a silent exit 0; one that raises or returns the wrong shape mid-training
stops the run in one line naming it and the step, and the last checkpoint resumes."""

from __future__ import annotations

import itertools
import json
import sys
import textwrap

import pytest
from train_helpers import TINY, assert_one_line_error, read_metrics

from gpt_train.checkpoint import load_checkpoint
from gpt_viz import RunLayout

_numbers = itertools.count()


@pytest.fixture
def kernel_module(tmp_path, monkeypatch):
    """kernel_module(source) -> 'module:attention', a kernel module written to the working directory, as a
    user's would be (each under a fresh name: a module stays imported for the rest of the process)."""
    monkeypatch.chdir(tmp_path)
    written = []

    def write(source: str) -> str:
        name = f"failing_kernel_{next(_numbers)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return f"{name}:attention"

    yield write
    for name in written:
        sys.modules.pop(name, None)


EXITS = """
    import sys
    def attention(q, k, v, causal):
        sys.exit(0)
"""
EXITS_ON_IMPORT = """
    import sys
    sys.exit(0)
    def attention(q, k, v, causal):
        return q
"""
RAISES = """
    def attention(q, k, v, causal):
        raise RuntimeError("boom")
"""
WRONG_SHAPE = """
    def attention(q, k, v, causal):
        return v[..., :-1]
"""
EXITS_IN_TRAINING = """
    import sys
    import torch
    from gpt_core import DEFAULT_KERNELS

    def attention(q, k, v, causal):
        if torch.is_grad_enabled() and q.shape[0] == 32:  # TINY's batch: a training step, not verification
            sys.exit(0)
        return DEFAULT_KERNELS.attention(q, k, v, causal)
"""


def stderr_lines(result) -> list[str]:
    assert "Traceback" not in result.err, result.err
    return result.err.strip().splitlines()


def test_verify_of_a_kernel_that_calls_sys_exit_fails_that_kernel(cli, kernel_module):
    choice = kernel_module(EXITS)
    result = cli("verify", "--kernel", f"attention={choice}")
    assert_one_line_error(
        result,
        f"kernel attention={choice}: sdpa causal: the forward raised KernelExit: ",
        f"kernel attention={choice} called sys.exit(0)",
        code=1,
    )
    assert "sdpa causal" in result.out  # the table is printed, each case failing


@pytest.mark.parametrize(
    ("source", "said"),
    [(EXITS, "{module}:attention called sys.exit(0)"), (EXITS_ON_IMPORT, "importing {module} called sys.exit(0)")],
    ids=["in the kernel", "on import"],
)
def test_run_with_a_kernel_that_calls_sys_exit_is_refused_and_writes_nothing(
    cli, kernel_module, tmp_path, source, said
):
    choice = kernel_module(source)
    run_dir = tmp_path / "run"
    result = cli(*TINY, "--steps", "5", "--kernel", f"attention={choice}", "--out", run_dir)
    assert_one_line_error(result, said.format(module=choice.partition(":")[0]))
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (RAISES, "RuntimeError: boom"),
        (WRONG_SHAPE, "RuntimeError: "),
        (EXITS_IN_TRAINING, "KernelExit: kernel attention={choice} called sys.exit(0)"),
    ],
    ids=["raises", "wrong shape", "sys.exit"],
)
def test_an_unverified_kernel_failing_in_training_stops_in_one_line_naming_it_and_the_step(
    cli, kernel_module, tmp_path, source, said
):
    choice = kernel_module(source)
    run_dir = tmp_path / "run"
    result = cli(*TINY, "--steps", "5", "--kernel", f"attention={choice}", "--unverified", "--out", run_dir)
    assert result.code == 2, result.err
    *warnings, last = stderr_lines(result)
    assert [line.startswith("gpt-train: warning: ") for line in warnings] == [True] * len(warnings)
    assert last.startswith(
        f"gpt-train: error: step 1 failed computing with kernel attention={choice} (unverified): "
    ), last
    assert said.format(choice=choice) in last and last.endswith("stopped (no checkpoint was written yet)"), last
    assert not (run_dir / RunLayout.CHECKPOINT).exists() and not (run_dir / RunLayout.FINAL).exists()


FAILS_FROM_STEP_13 = """
    import os
    import torch
    from gpt_core import DEFAULT_KERNELS

    training_calls = 0

    def attention(q, k, v, causal):
        '''gpt-core's attention, raising from the 13th training step on while FAIL_IN_TRAINING is set.'''
        global training_calls
        if torch.is_grad_enabled() and q.shape[0] == 32:  # TINY's batch: a training step (one layer)
            training_calls += 1
            if training_calls > 12 and os.environ.get("FAIL_IN_TRAINING"):
                raise RuntimeError("boom")
        return DEFAULT_KERNELS.attention(q, k, v, causal)
"""


def test_a_kernel_failing_mid_training_leaves_the_last_checkpoint_resumable(cli, kernel_module, tmp_path, monkeypatch):
    choice = kernel_module(FAILS_FROM_STEP_13)
    run_dir = tmp_path / "run"
    monkeypatch.setenv("FAIL_IN_TRAINING", "1")
    result = cli(*TINY, "--kernel", f"attention={choice}", "--unverified", "--out", run_dir)
    assert_one_line_error(
        result,
        f"step 13 failed computing with kernel attention={choice} (unverified): RuntimeError: boom",
        f"stopped (the last good checkpoint is {run_dir / RunLayout.CHECKPOINT})",
    )
    assert load_checkpoint(run_dir / RunLayout.CHECKPOINT, "sort").step == 10  # checkpoint_every=10
    assert not (run_dir / RunLayout.FINAL).exists()

    monkeypatch.delenv("FAIL_IN_TRAINING")
    resumed = cli("run", "--resume", run_dir, "--quiet", "--trust-kernels")
    assert resumed.code == 0, resumed.err
    assert [r["step"] for r in read_metrics(run_dir)] == [5, 10, 15, 20, 25, 30]
    assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 30


NOT_PLAIN = {
    "on another device": ("return out.detach().to('meta')", "its output is on device meta, not cpu"),
    "sparse": ("return out.to_sparse()", "its output is a sparse tensor (torch.sparse_coo)"),
    "a tensor subclass": ("return Odd(out)", "its output is a Odd, a tensor subclass"),
    "nested": ("return strided_nested(out)", "its output is a nested tensor"),  # a jagged one is a tensor subclass
}
NOT_PLAIN_SOURCE = """
    import warnings

    import torch
    from gpt_core import DEFAULT_KERNELS

    class Odd(torch.Tensor):
        pass

    def strided_nested(out):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the layout's "prototype stage" warning
            return torch.nested.nested_tensor([out.detach()])

    def attention(q, k, v, causal):
        out = DEFAULT_KERNELS.attention(q, k, v, causal)
        {returns}
"""


@pytest.mark.parametrize("output", list(NOT_PLAIN))
def test_a_kernel_whose_output_is_not_a_dense_tensor_on_its_inputs_device_fails_verify_and_run_in_one_line(
    cli, kernel_module, tmp_path, output
):
    returns, said = NOT_PLAIN[output]
    choice = kernel_module(NOT_PLAIN_SOURCE.replace("{returns}", returns))
    verified = cli("verify", "--kernel", f"attention={choice}")
    assert_one_line_error(
        verified, f"kernel attention={choice}: sdpa causal: the forward raised TypeError: {said}", code=1
    )
    run_dir = tmp_path / "run"
    ran = cli(*TINY, "--steps", "3", "--kernel", f"attention={choice}", "--out", run_dir)
    assert_one_line_error(ran, f"kernel attention={choice} fails verification", said)
    assert not run_dir.exists()
