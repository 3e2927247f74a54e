"""`--kernels reference|fast`: the kernel set a run trains with and verify checks, recorded and kept."""

from __future__ import annotations

import json
import re

import pytest
import torch
from train_helpers import TINY, assert_one_line_error

from gpt_core import FAST_KERNELS, REFERENCE_KERNELS
from gpt_train.loading import load_run
from gpt_viz import RunLayout


def test_verify_checks_the_reference_set_against_pytorch(cli):
    result = cli("verify", "--kernels", "reference", "--seed", "0")
    assert result.code == 0, result.err
    assert "reference kernels: all 32 checks within 1e-12" in result.out
    assert "reference kernels: second derivatives: all 8 checks within 1e-12" in result.out


def test_a_run_on_the_reference_kernels_records_them_and_is_loaded_with_them(cli, tmp_path):
    run_dir = tmp_path / "reference"
    result = cli(*TINY, "--kernels", "reference", "--out", run_dir)
    assert result.code == 0, result.err
    assert json.loads(RunLayout(run_dir).config.read_text())["train"]["kernels"] == "reference"
    model = load_run(run_dir, torch.device("cpu")).model
    assert model.kernels == REFERENCE_KERNELS


def test_a_run_written_before_kernel_sets_loads_with_the_fast_set(cli, tiny_run):
    path = RunLayout(tiny_run).config
    config = json.loads(path.read_text())
    del config["train"]["kernels"]  # as config.json was written before the option existed
    path.write_text(json.dumps(config))
    model = load_run(tiny_run, torch.device("cpu")).model
    assert model.kernels == FAST_KERNELS


def test_the_reference_and_fast_sets_train_the_same_first_steps_from_the_same_seed(cli, tmp_path):
    losses = {}
    for kernels in ("fast", "reference"):
        run_dir = tmp_path / kernels
        assert cli(*TINY, "--kernels", kernels, "--out", run_dir).code == 0
        records = [json.loads(line) for line in RunLayout(run_dir).metrics.read_text().splitlines()]
        losses[kernels] = [r["loss"] for r in records if "loss" in r][:3]
    assert losses["fast"] and torch.allclose(torch.tensor(losses["fast"]), torch.tensor(losses["reference"]), atol=1e-4)


def test_resume_refuses_a_kernel_set(cli, tiny_run):
    assert_one_line_error(cli("run", "--resume", tiny_run, "--kernels", "reference"), "drop --kernels")


def test_an_unknown_kernel_set_is_one_line(cli):
    result = cli(*TINY, "--kernels", "quick")
    assert result.code == 2 and "'quick' is not one of 'fast', 'reference'" in result.err


def test_naming_the_triton_set_without_triton_says_how_to_install_it(monkeypatch):
    """Instead of click's bare list of choices, which leaves out a set that is not installed: on the command line,
    and in a run's settings (`--set kernels=triton`, or a triton run resumed or evaluated where Triton is not)."""
    import importlib.util

    import click

    from gpt_train.cli.options import KernelSetChoice
    from gpt_train.settings import TrainSettings

    spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else spec(name, *a))
    choice = KernelSetChoice()
    assert list(choice.choices) == ["fast", "reference"]
    needs = "the triton set needs Triton (pip install 'gpt-core[triton]'); use fast (the default) or reference"
    with pytest.raises(click.BadParameter, match=re.escape(needs)):
        choice.convert("triton", None, None)
    with pytest.raises(click.BadParameter, match="'quick' is not one of 'fast', 'reference'"):
        choice.convert("quick", None, None)
    with pytest.raises(ValueError, match=re.escape("the triton set needs Triton (pip install 'gpt-core[triton]'); ")):
        TrainSettings(kernels="triton")


def fake_gpu(monkeypatch, capability: tuple[int, int]) -> torch.device:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    return torch.device("cuda")


def test_the_triton_set_is_the_default_only_on_the_gpus_it_is_made_for(monkeypatch):
    """Its 16-bit dQ kernel at head dim 128 needs 72 KiB of shared memory, and a T4 (7.5) has 64: it crashed there."""
    from gpt_core import KERNEL_SETS
    from gpt_train.kernels import default_kernel_set, kernel_set_for

    monkeypatch.setitem(KERNEL_SETS._sets, "triton", KERNEL_SETS["reference"])  # as if Triton were installed
    assert default_kernel_set(fake_gpu(monkeypatch, (8, 0))) == "triton"
    assert default_kernel_set(fake_gpu(monkeypatch, (7, 5))) == "fast"
    assert kernel_set_for("triton", fake_gpu(monkeypatch, (7, 5))) is KERNEL_SETS["fast"]  # a run trained on an A100


def test_the_triton_set_asked_for_on_an_older_gpu_is_one_line(monkeypatch):
    from gpt_train.kernels import KernelError, check_kernel_set

    with pytest.raises(KernelError, match=r"compute capability 8.0 or later .*, and Tesla T4 is 7.5; use the fast"):
        check_kernel_set("triton", fake_gpu(monkeypatch, (7, 5)))
    check_kernel_set("triton", fake_gpu(monkeypatch, (9, 0)))


def test_verify_refuses_the_triton_set_on_an_older_gpu_as_run_does(cli, monkeypatch):
    pytest.importorskip("triton", reason="verify --kernels offers the sets installed: triton needs Triton")
    fake_gpu(monkeypatch, (7, 5))
    monkeypatch.setattr("gpt_train.devices.resolve_device", lambda name: torch.device("cuda"))
    assert_one_line_error(cli("verify", "--device", "cuda", "--kernels", "triton"), "Tesla T4 is 7.5")


def drops_half(x, p, training):
    """Inverted dropout at rate 1/2 whatever p is: its kept elements are scaled right, so only the share shows it."""
    return x * (torch.rand_like(x) >= 0.5) / (1 - p) if training and p > 0 else x


def never_drops(q, k, v, causal=True, dropout_p=0.0):
    return REFERENCE_KERNELS.attention(q, k, v, causal)


@pytest.mark.parametrize(
    ("slot", "kernel", "row"),
    [("dropout", drops_half, "dropout, training: share of zeros"),
     ("attention", never_drops, "sdpa causal, dropout: O (1-p) + P [O = 0]")],
    ids=["dropout-rate", "attention-dropout"],
)  # fmt: skip
def test_a_triton_dropout_that_draws_wrong_stops_the_run_before_it_trains(
    cli, tmp_path, monkeypatch, slot, kernel, row
):
    """The first-step check runs its step in eval mode, where nothing draws: the dropout a training step runs is
    checked apart, on the device, by what holds for any draw."""
    import dataclasses

    import gpt_core.kernels
    from gpt_core import KERNEL_SETS

    monkeypatch.setattr(gpt_core.kernels, "_triton_installed", lambda: False)  # triton from _sets alone
    monkeypatch.setitem(KERNEL_SETS._sets, "triton", dataclasses.replace(REFERENCE_KERNELS, **{slot: kernel}))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # where the triton set runs without a GPU
    result = cli(*TINY, "--set", "kernels=triton", "--set", "dropout=0.1", "--out", tmp_path / "run")
    checked = "--kernels triton: its dropout, checked on the device by what holds for any draw"
    assert_one_line_error(result, f"{checked}: {row}")
    assert not RunLayout(tmp_path / "run").checkpoint.exists()


@pytest.mark.parametrize("dropout", ["0.0", "0.1"])
def test_triton_failing_on_the_gpu_is_one_line(cli, tmp_path, monkeypatch, dropout):
    """A kernel that needs more shared memory than the GPU has raised Triton's own OutOfResources, a traceback. With
    dropout, the first-step check runs the kernels that draw as well (its step runs in eval mode), and names them."""
    triton_errors = pytest.importorskip("triton.runtime.errors")
    import dataclasses

    import gpt_core.kernels
    from gpt_core import KERNEL_SETS

    def out_of_resources(q, k, v, causal=True, dropout_p=0.0):
        if dropout_p > 0 or dropout == "0.0":
            raise triton_errors.OutOfResources(81_920, 65_536, "shared memory")
        return KERNEL_SETS["reference"].attention(q, k, v, causal, dropout_p)

    failing = dataclasses.replace(KERNEL_SETS["reference"], attention=out_of_resources)
    monkeypatch.setattr(gpt_core.kernels, "_triton_installed", lambda: False)  # triton from _sets alone
    monkeypatch.setitem(KERNEL_SETS._sets, "triton", failing)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # where the triton set runs without a GPU
    result = cli(*TINY, "--set", "kernels=triton", "--set", f"dropout={dropout}", "--out", tmp_path / "run")
    failed = "Triton failed (" if dropout == "0.0" else "its dropout, checked on the device by what holds for any draw"
    assert_one_line_error(result, failed, "OutOfResources: out of resource: shared memory")
    assert "use --kernels fast, and please report it" in result.err
