"""--compile: the compiled step checks itself against an eager one, the trainer's step and evaluation compile as
one graph each with no recompilation, and a compiled run trains the model an eager run does."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from train_helpers import TINY, assert_one_line_error

from gpt_core import GPT, GPTConfig
from gpt_core.compiling import compiled
from gpt_core.testing.compiled import GraphCounter
from gpt_train.compiling import LONGEST, CompileError, Step, check_compiled_step, compiler_failures_explained
from gpt_train.config import resolve_run_config
from gpt_train.distributed import Rank
from gpt_train.kernels import KernelError, check_compilable
from gpt_train.runs import Run
from gpt_train.trainer import Outcome, Trainer, evaluate_splits
from gpt_viz import RunLayout

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the compiler's own, on importing it

WRONG_WHEN_COMPILED = "layer_norm=kernel_examples:layer_norm_wrong_when_compiled"
NEEDS_TRITON = pytest.mark.skipif(  # the set exists where gpt-core[triton] is installed (nox: gpt-core's session)
    importlib.util.find_spec("triton") is None, reason="the triton kernel set needs Triton installed"
)


def test_a_compiled_run_whose_gradients_are_wrong_stops_at_its_first_step_naming_the_parameter(cli, tmp_path):
    run_dir = tmp_path / "run"
    result = cli(*TINY, "--compile", "--kernel", WRONG_WHEN_COMPILED, "--out", run_dir)
    assert_one_line_error(
        result, "compiled first step disagrees with the eager one", "the gradient of ", "drop --compile"
    )
    assert not (run_dir / RunLayout.CHECKPOINT).exists()
    assert not (run_dir / RunLayout.FINAL).exists()


def test_drop_compile_means_the_same_command_without_it_and_resume_takes_no_compile(cli, tmp_path):
    """What the message says works: the run stopped before its first step, so its directory takes the same command
    without --compile, or --resume with --no-compile (config.json keeps how the run started)."""
    new, resumed = tmp_path / "new", tmp_path / "resumed"
    again = {
        new: (*TINY, "--kernel", WRONG_WHEN_COMPILED, "--out", new),
        resumed: ("run", "--resume", resumed, "--no-compile", "--trust-kernels"),
    }
    for run_dir, command in again.items():
        assert cli(*TINY, "--compile", "--kernel", WRONG_WHEN_COMPILED, "--out", run_dir).code != 0
        result = cli(*command)
        assert result.code == 0, result.err
        assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 30
    assert json.loads((resumed / "config.json").read_text())["train"]["compile"] is True


def test_a_resumed_run_whose_compiled_step_disagrees_is_told_to_resume_with_no_compile():
    problem = check_compiled_step(EAGER, step(2.5, w=[1.0, 2.0], b=[0.5]), 1e-2, resumed=True)
    assert problem.endswith("(resume it with --no-compile)")


def test_the_same_kernel_trains_eagerly(cli, tmp_path):
    """The kernel above is right without the compiler: the check is what stops the compiled run."""
    result = cli(*TINY, "--kernel", WRONG_WHEN_COMPILED, "--out", tmp_path / "run")
    assert result.code == 0, result.err


def test_a_compiled_run_learns_what_the_eager_run_learns(cli, tmp_path):
    for name, extra in (("eager", ()), ("compiled", ("--compile",))):
        assert cli(*TINY, *extra, "--steps", "60", "--out", tmp_path / name).code == 0
    eager, compiled_ = (json.loads((tmp_path / name / RunLayout.FINAL).read_text()) for name in ("eager", "compiled"))
    # float32 on the CPU: the compiled step rounds differently, so the runs drift apart, but not in what they learn
    assert abs(compiled_["loss"] - eager["loss"]) < 0.05 * eager["loss"]
    assert abs(compiled_["heldout_token_accuracy"] - eager["heldout_token_accuracy"]) < 0.05


def test_a_compiled_run_whose_dropout_is_wrong_only_in_training_stops_before_training(cli, tmp_path):
    """The compiled first step of a model that draws runs in eval mode, where dropout draws nothing: its dropout is
    checked compiled, apart, by what holds for any draw."""
    run_dir = tmp_path / "run"
    wrong = "dropout=kernel_examples:dropout_wrong_when_compiled"
    result = cli(*TINY, "--compile", "--set", "dropout=0.1", "--kernel", wrong, "--out", run_dir)
    assert_one_line_error(
        result, "--compile: its dropout fails a check that holds for any draw: compiled dropout, training: y (1-p)",
        "gradient of x", "drop --compile",
    )  # fmt: skip
    assert not (run_dir / RunLayout.CHECKPOINT).exists()


def test_a_compiled_run_with_dropout_trains(cli, tmp_path):
    """Dropout drew its mask with torch.rand(x.shape), and the last block's rows (those read) have a data-dependent
    count: the compiler failed at the first step."""
    result = cli(*TINY, "--compile", "--set", "dropout=0.1", "--steps", "10", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "run" / RunLayout.FINAL).read_text())["step"] == 10


def step(loss: float, **grads: list[float]) -> Step:
    return Step(loss, {name: torch.tensor(values) for name, values in grads.items()})


EAGER = step(2.0, w=[1.0, 2.0], b=[0.5])


@pytest.mark.parametrize(
    ("compiled_step", "named"),
    [
        (step(2.0, w=[1.0, 2.0], b=[0.5]), None),
        (step(2.0, w=[1.0, 2.0000001], b=[0.5]), None),  # rounding
        (step(2.0, w=[1.0, 2.5], b=[0.5]), "the gradient of w differs by 0.22 relative"),
        (step(2.0, w=[1.0, 2.0], b=[0.0]), "the gradient of b differs by 1 relative"),
        (step(2.5, w=[1.0, 2.0], b=[0.5]), "the loss differs by 0.25 relative (2.5 against 2)"),
        (
            step(2.0, w=[1.0, float("inf")], b=[0.5]),
            "the gradient of w is not finite at 1 of its 2 entries, the eager one at 0",
        ),
        (step(float("nan"), w=[1.0, 2.0], b=[0.5]), "the loss differs by inf"),
    ],
)
def test_the_compiled_step_check_names_the_loss_or_the_parameter_that_differs_most(compiled_step, named):
    problem = check_compiled_step(EAGER, compiled_step, tolerance=1e-2)
    assert problem is None if named is None else named in problem


@pytest.mark.parametrize(("kernels", "other"), [("fast", "reference"), ("reference", "fast"), ("triton", "reference")])
def test_the_compiled_step_check_suggests_another_kernel_set_than_the_runs(kernels, other):
    problem = check_compiled_step(EAGER, step(2.5, w=[1.0, 2.0], b=[0.5]), 1e-2, kernels=kernels)
    assert problem.endswith(f"(drop --compile, or try --kernels {other})")


def test_gradients_that_overflow_in_different_places_are_named_so():
    problem = check_compiled_step(step(2.0, w=[1.0, float("inf")]), step(2.0, w=[float("inf"), 2.0]), 1e-2)
    assert (
        "the gradient of w is not finite at 1 of its 2 entries, the eager one at 1, and not at the same ones" in problem
    )


def test_gradients_that_overflow_alike_in_both_steps_agree():
    """fp16's first scaled gradients may be inf in both: the check compares what is finite."""
    overflowed = step(2.0, w=[float("inf"), 2.0])
    assert check_compiled_step(overflowed, step(2.0, w=[float("inf"), 2.0]), tolerance=1e-2) is None


def test_a_step_whose_own_rounding_is_large_accepts_as_much_from_the_compiler_and_no_more():
    """Near convergence a gradient is a difference of large terms: the eager step is itself 5% from the float64
    one, so the compiled step may be up to ten times that from the eager one; a wrong one is further still."""
    exact = step(1e-3, w=[1.0, 0.0])
    eager = step(1e-3, w=[1.0, 0.05])  # 5% from exact
    assert check_compiled_step(eager, step(1e-3, w=[1.0, -0.2]), 1e-2, exact) is None  # 25% from eager
    problem = check_compiled_step(eager, step(1e-3, w=[1.0, 1.0]), 1e-2, exact)  # 95%
    assert "the gradient of w differs by 0.95 relative, beyond the 0.5 accepted" in problem


@pytest.mark.parametrize("n_layer", [2, 12])
def test_the_trainers_step_and_evaluation_compile_whole_with_no_recompilation(tmp_path, n_layer):
    """fullgraph=True: a graph break is an error. Three training steps (forward with `read`, backward) are one
    graph; two evaluations (eval mode, no gradient) are one more. At 12 layers no block is compiled on its own
    (which a graph break inside the block's forward would do, once per block, into dynamo's recompile limit)."""
    settings = {"length": 4, "n_layer": n_layer, "n_embd": 32, "n_head": 2, "batch_size": 32, "eval_limit": 256}
    config, task = resolve_run_config("sort", settings)
    trainer = Trainer(Run(config, task, RunLayout(tmp_path), torch.device("cpu"), Rank(), resume=False), quiet=True)
    torch._dynamo.reset()
    counter = GraphCounter()
    trainer.forward = compiled(trainer.model, fullgraph=True, backend=counter)
    for step in range(3):
        trainer.train_step(step)
    assert counter.graphs == 1
    for _ in range(2):
        evaluate_splits(task, trainer.forward, torch.device("cpu"), ["heldout"], limit=256)
    assert counter.graphs == 2


def test_a_compiled_ddp_model_split_at_its_gradient_buckets_gives_the_eager_gradients(tmp_path, monkeypatch):
    """Under torchrun the trainer compiles the DistributedDataParallel wrapper (`compiled(ddp)`), and the compiler
    splits the graph where DDP's gradient buckets end, so that each bucket's all-reduce can start while the rest of
    the backward runs. Small buckets (1 MB, DDP's smallest first bucket) split this 2-layer model, on one gloo rank,
    as a GPT-2 on many GPUs is split at 25 MB: its loss and gradients are the eager DDP model's."""
    from torch._dynamo.backends.distributed import DDPOptimizer
    from torch.nn.parallel import DistributedDataParallel

    buckets = []
    split = DDPOptimizer.compile_fn

    def counted(self, *args, **kwargs):
        result = split(self, *args, **kwargs)
        buckets.append(len(self.buckets))
        return result

    monkeypatch.setattr(DDPOptimizer, "compile_fn", counted)
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=17, block_size=16, n_layer=2, n_head=4, n_embd=192))
        idx, targets = torch.randint(17, (4, 16)), torch.randint(17, (4, 16))
        ddp = DistributedDataParallel(model, device_ids=None, bucket_cap_mb=1)
        steps = {}
        for name, module in (("eager", ddp), ("compiled", compiled(ddp))):
            model.zero_grad()
            loss = module(idx, targets).loss
            loss.backward()
            steps[name] = (loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()})
    finally:
        torch.distributed.destroy_process_group()
        torch._dynamo.reset()
    assert buckets and buckets[0] >= 3, buckets  # the forward graph, in three or more pieces
    (eager_loss, eager), (compiled_loss, ours) = steps["eager"], steps["compiled"]
    assert abs(compiled_loss - eager_loss) < 1e-5
    assert eager.keys() == ours.keys()
    assert max(float((ours[name] - grad).abs().max()) for name, grad in eager.items()) < 1e-5


@NEEDS_TRITON
def test_compile_with_the_triton_set_in_tritons_interpreter_is_refused_before_anything_is_written(
    cli, tmp_path, monkeypatch
):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = cli(*TINY, "--compile", "--kernels", "triton", "--out", tmp_path / "run")
    assert_one_line_error(result, "--compile cannot trace the triton set in Triton's interpreter", "drop --compile")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("TorchRuntimeError('when making fake tensor call\\n Explanation: " + "x" * 2000, None),  # a whole repr
        ("\nC:\\new_folder\\model.py: failed\nmore", "C:\\new_folder\\model.py: failed"),
        ("", "RuntimeError"),
    ],
)
def test_a_compiler_failure_is_one_short_line_its_first_non_blank_one(message, shown):
    def fails():
        raise RuntimeError(message)

    with pytest.raises(CompileError) as error:
        compiler_failures_explained(fails)
    line = str(error.value).removeprefix("torch.compile failed: ")
    assert "\n" not in line
    assert line == shown if shown is not None else len(line) == LONGEST and line.endswith("...")


@NEEDS_TRITON
def test_a_resumed_run_is_told_to_resume_with_no_compile_where_compiling_cannot_work(cli, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--compile", "--kernel", WRONG_WHEN_COMPILED, "--out", run_dir).code != 0
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    config = json.loads((run_dir / "config.json").read_text())
    config["train"]["kernels"] = "triton"
    (run_dir / "config.json").write_text(json.dumps(config))
    result = cli("run", "--resume", run_dir, "--trust-kernels")
    assert_one_line_error(result, "cannot trace the triton set", "resume it with --no-compile")


def test_no_compile_given_with_set_compile_is_named_as_given(cli, tmp_path):
    result = cli(*TINY, "--no-compile", "--set", "compile=true", "--out", tmp_path / "run")
    assert_one_line_error(result, "--no-compile and --set compile both set compile")


@NEEDS_TRITON
def test_verify_refuses_compile_with_the_triton_set_in_tritons_interpreter_in_one_line(cli):
    result = cli("verify", "--kernels", "triton", "--compile", "--seed", "0")
    assert_one_line_error(result, "--compile cannot trace the triton set in Triton's interpreter", "drop --compile")


def test_the_resume_command_printed_keeps_no_compile(cli, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    (run_dir / RunLayout.FINAL).unlink()  # the final evaluation left to do
    monkeypatch.setattr(Trainer, "run", lambda self: Outcome("interrupted", 30, detail="checkpoint written"))
    result = cli("run", "--resume", run_dir, "--no-compile")
    assert_one_line_error(result, f"Resume with: gpt-train run --resume {run_dir} --no-compile", code=130)


def test_the_compile_check_refuses_the_triton_interpreter_and_says_how_to_turn_compiling_off(monkeypatch):
    """The rule itself, where Triton is not installed too (the CLI tests above need the set to exist)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cpu = torch.device("cpu")
    with pytest.raises(KernelError, match=r"cannot trace the triton set .*; drop --compile$"):
        check_compilable("triton", cpu)
    with pytest.raises(KernelError, match=r"; resume it with --no-compile$"):
        check_compilable("triton", cpu, resumed=True)
    check_compilable("fast", cpu)
    monkeypatch.delenv("TRITON_INTERPRET")
    check_compilable("triton", cpu)  # without the interpreter the set is refused on the CPU elsewhere
