"""Apple's MPS has no float64: `tensor.double()` on an MPS tensor raises. The analyses, the modadd task's
measurements and training sum in float64 on purpose, so each must move its tensors to the CPU first
(`x.cpu().double()`, never `x.double().cpu()`). No MPS here, so `OnDevice` stands in for one: a tensor moved to a
`torch.device` (the run's device) counts as on the device, as does whatever is computed from one, and making a
float64 or complex128 tensor there raises as MPS does; `.cpu()`, `.to("cpu")` and `device="cpu"` lead back to the
host. Every other number is the CPU's own, so the runs' results are compared with the same runs made without it.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from gpt_train.compiling import relative_difference
from gpt_viz import RunLayout

WIDE = (torch.float64, torch.complex128)
HOST = torch.device("cpu")  # what `x.device` is for a tensor on the host; any other torch.device is the device's


def _to_host(args: tuple, kwargs: dict) -> bool | None:
    """Where a move or a factory puts its result: True for the host ("cpu", or a host tensor's `.device`), False
    for the device (any other torch.device, as the run's device is), None where it names neither."""
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.device):
            return value is HOST
        if isinstance(value, str) and value.split(":")[0] == "cpu":
            return True
    return None


class OnDevice(TorchFunctionMode):
    """A CPU standing in for an MPS device: float64 and complex128 tensors cannot live on it."""

    def __init__(self):
        super().__init__()
        self.on_device = WeakIdKeyDictionary()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:
            return torch.device("cpu") if args[0] in self.on_device else HOST
        out = func(*args, **kwargs)
        leaves = [leaf for leaf in tree_flatten((args, kwargs))[0] if isinstance(leaf, torch.Tensor)]
        target = True if func is torch.Tensor.cpu else _to_host(args[1:] if func is torch.Tensor.to else (), kwargs)
        if target is None:
            there = any(leaf in self.on_device for leaf in leaves)
        else:
            there = not target
        if func is torch.Tensor.numpy and any(leaf in self.on_device for leaf in leaves):
            raise TypeError("can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() first.")
        outputs = [leaf for leaf in tree_flatten(out)[0] if isinstance(leaf, torch.Tensor)]
        if target is not None and not isinstance(out, torch.nn.Parameter) and any(out is leaf for leaf in leaves):
            out = out.view_as(out)  # a move to where a tensor already is returns it: a new one moves, the old stays
            outputs = [out]
        if there:
            for output in outputs:
                if output.dtype in WIDE:
                    raise TypeError(f"{func}: MPS has no {output.dtype} (stand-in device)")
                self.on_device[output] = True
        return out


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
    assert "heldout_fourier_top5_share" in runs["plain"][0]
    assert runs["on_device"] == runs["plain"]


def test_the_report_on_addition_keeps_float64_off_the_device(cli, tmp_path):
    out = tmp_path / "addition"
    assert cli("run", "--task", "addition", *SMALL, "--set", "digits=2", "--out", out).code == 0
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
