"""The same runs on CUDA and Apple MPS where this machine has them (skipped, with the reason, where not)."""

from __future__ import annotations

import json

import pytest
import torch
from train_helpers import TINY, is_count_of

from gpt_tasks import get_task
from gpt_viz import RunLayout

ACCELERATORS = [
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")),
    pytest.param("mps", marks=pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device here")),
]


def on(device: str) -> list[str]:
    args = list(TINY)
    args[args.index("--device") + 1] = device
    return args


@pytest.mark.parametrize("device", ACCELERATORS)
def test_run_trains_and_evaluates_on_the_accelerator(cli, tmp_path, device):
    result = cli(*on(device), "--out", tmp_path / "run")
    assert result.code == 0, result.err
    final = json.loads((tmp_path / "run" / RunLayout.FINAL).read_text())
    assert final["step"] == 30
    assert final["heldout_examples"] == get_task("sort", length=4).split.count("heldout")
    assert is_count_of(final["heldout_exact_match"], final["heldout_examples"])
    assert cli("eval", tmp_path / "run", "--device", device, "--limit", "50").code == 0
    cached = cli("sample", tmp_path / "run", "--device", device, "--prompt", "3141").out
    assert cached == cli("sample", tmp_path / "run", "--device", device, "--prompt", "3141", "--no-cache").out


@pytest.mark.parametrize("device", ACCELERATORS[:1])
def test_compiled_run_on_the_accelerator(cli, tmp_path, device):
    result = cli(*on(device), "--compile", "--out", tmp_path / "run")
    assert result.code == 0, result.err
