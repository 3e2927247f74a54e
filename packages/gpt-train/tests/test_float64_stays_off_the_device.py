"""Apple's MPS has no float64: `tensor.double()` on an MPS tensor raises. The analyses, the modadd task's
measurements and the compiled-step check sum in float64 on purpose, so each moves its tensors to the CPU first
(`x.cpu().double()`, never `x.double().cpu()`). No MPS here: `OnDevice` stands a CPU in for one, and the runs'
results are compared with the same runs made without it. test_accelerators.py runs every task through it too."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from device_stand_in import OnDevice
from lab_runs import trained_sort

from gpt_core.testing.verification import difference
from gpt_train.compiling import relative_difference
from gpt_viz import RunLayout

SMALL = (
    "--device", "cpu", "--quiet", "--steps", "20", "--batch-size", "16", "--set", "n_layer=1", "--set", "n_embd=32",
    "--set", "n_head=2", "--set", "eval_every=10", "--set", "eval_limit=64", "--set", "final_eval_limit=64",
    "--no-pictures",
)  # fmt: skip
RECORDS = ("heads", "logit_lens", "patch_resid_pre", "patch_attn_out", "patch_mlp_out", "reads")


def test_the_stand_in_refuses_float64_on_the_device_and_not_after_cpu():
    with OnDevice():
        on_device = torch.arange(3.0).to(torch.device("cpu"))
        with pytest.raises(TypeError, match="no torch.float64"):
            (on_device * 2).double()
        with pytest.raises(TypeError, match="no torch.float64"):
            on_device.new_zeros(2, dtype=torch.float64)
        with pytest.raises(TypeError, match="numpy"):
            on_device.numpy()
        assert (on_device * 2).cpu().double().tolist() == [0.0, 2.0, 4.0]
        assert torch.zeros(2, dtype=torch.float64, device=on_device.cpu().device).dtype == torch.float64


def test_modadd_trains_with_its_fourier_and_progress_measures_and_phases_reads_them_on_a_float32_device(cli, tmp_path):
    runs = {}
    for name, device in (("on_device", OnDevice()), ("plain", contextlib.nullcontext())):
        out = tmp_path / name
        with device:
            trained = cli(
                "run", "--task", "modadd", *SMALL, "--set", "p=13", "--set", "snapshot_every=10", "--out", out
            )
            assert trained.code == 0, trained.err
            phases = cli("inspect", out, "phases", "--device", "cpu")
            assert phases.code == 0, phases.err
        final = json.loads((out / RunLayout.FINAL).read_text())
        runs[name] = (
            {key: value for key, value in final.items() if key != "elapsed"},
            phases.out.replace(str(out), "RUN"),
        )
    assert "heldout_probe_fourier_top5_share" in runs["plain"][0]
    assert runs["on_device"] == runs["plain"]


def test_the_report_keeps_float64_off_the_device(cli, tmp_path):
    out = trained_sort(tmp_path / "sort")  # learned: patching refuses a model whose answer barely depends on a token
    report = ("inspect", out, "report", "--device", "cpu", "--examples", "64", "--pairs", "32")
    with OnDevice():
        reported = cli(*report)
    assert reported.code == 0, reported.err
    on_device = {name: (out / f"inspect_{name}.json").read_text() for name in RECORDS}
    assert cli(*report).code == 0
    assert on_device == {name: (out / f"inspect_{name}.json").read_text() for name in RECORDS}


def test_the_compiled_step_check_compares_gradients_on_the_cpu_in_float64():
    with OnDevice():
        gradient = torch.tensor([1.0, 2.0, 2.0]).to(torch.device("cpu"))
        assert relative_difference(gradient * 1.5, gradient) == pytest.approx(0.5)


def test_verify_takes_its_differences_on_the_cpu():
    """`gpt-train verify --device mps` runs the kernels and the built-ins in float32 on the device; the largest
    difference was taken in float64 there, and raised."""
    with OnDevice():
        ours, theirs = torch.tensor([[1.0, 2.5], [3.0, 4.0]]).to(torch.device("cpu")).unbind(1)
        assert difference("output", ours, theirs) == (1.5, "output [0]")
