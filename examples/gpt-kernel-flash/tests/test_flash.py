"""The flash kernel, installed as a third party would: gpt-train finds it, verifies it against PyTorch,
trains with it; it equals the plain kernel at every tile size; and it never forms a T x T matrix."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys

import pytest
import torch

from gpt_core import DEFAULT_KERNELS
from gpt_core.testing import LargestTensor
from gpt_kernel_flash import flash_attention
from gpt_train.cli import main
from gpt_train.kernels import default_kernel_registry, first_failure, verify_kernel

TINY = (
    "run", "--task", "sort", "--device", "cpu", "--quiet", "--steps", "30", "--batch-size", "32",
    "--set", "length=4", "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2",
    "--set", "eval_every=10", "--set", "eval_limit=200", "--set", "checkpoint_every=10",
)  # fmt: skip


@pytest.fixture
def cli(capsys):
    """cli(*args) -> (exit code, stdout, stderr), through gpt-train's real entry point."""

    def invoke(*args):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return invoke


def test_gpt_train_finds_the_plugin_with_its_distribution():
    info = default_kernel_registry().info("attention", "flash")
    assert (info.plugin, info.distribution, info.function) == ("flash", "gpt-kernel-flash", flash_attention)
    assert info.description.startswith("Attention tile by tile with an online softmax")


def test_the_plugin_needs_gpt_core_alone():
    """Importing the plugin and calling its hook, as the registry does, imports nothing of gpt-train."""
    script = (
        "import sys, gpt_kernel_flash\n"
        "registered = []\n"
        "gpt_kernel_flash.register_kernels(register=lambda *args: registered.append(args))\n"
        "assert registered == [('attention', 'flash', gpt_kernel_flash.flash_attention)], registered\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('gpt')}))\n"
    )
    result = subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["['gpt_core',", "'gpt_kernel_flash']"]


def test_gpt_train_kernels_lists_it(cli):
    code, out, _ = cli("kernels")
    assert code == 0
    assert any(line.split()[:4] == ["attention", "flash", "flash", "gpt-kernel-flash"] for line in out.splitlines())


def test_gpt_train_verify_passes_it_within_1e_12(cli):
    code, out, err = cli("verify", "--kernel", "attention=flash", "--seed", "0")
    assert code == 0, err
    assert re.search(r"^kernel attention=flash: all \d+ checks within 1e-12", out, re.MULTILINE), out  # any count


@pytest.mark.parametrize("tile", [1, 3, 16, 64, 200])
def test_every_tile_size_is_the_same_attention(tile):
    """Tiles of one row, ragged tiles, and one tile larger than the sequence: all pinned to PyTorch."""
    rows = verify_kernel("attention", functools.partial(flash_attention, tile=tile), seed=tile)
    assert first_failure(rows) is None, rows


def test_a_second_derivative_through_it_is_refused_rather_than_missing_terms():
    q, k, v = (torch.randn(1, 1, 5, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, True)
    with pytest.raises(RuntimeError, match="gpt_kernel_flash.flash's backward differentiates once"):
        torch.autograd.grad(out.square().sum(), (q, k, v), create_graph=True)


def largest_tensors_of_a_step(kernel, n: int) -> tuple[int, int]:
    """The largest tensor made in the forward, and in the backward, of attention over n positions."""
    q, k, v = (torch.randn(1, 1, n, 16, requires_grad=True) for _ in range(3))
    with LargestTensor() as forward:
        out = kernel(q, k, v, True)
    with LargestTensor() as backward:
        out.sum().backward()
    return forward.largest, backward.largest


def test_the_t_by_t_matrix_is_never_materialised():
    n = 512
    assert min(largest_tensors_of_a_step(DEFAULT_KERNELS.attention, n)) >= n * n  # the watch sees the plain one's
    assert max(largest_tensors_of_a_step(flash_attention, n)) <= max(64 * 64, n * 16)  # a tile, or q, k, v


def test_sort_trains_with_it_as_with_gpt_cores_own(cli, tmp_path):
    losses = {}
    for name, extra in {"flash": ["--kernel", "attention=flash"], "own": []}.items():
        run_dir = tmp_path / name
        code, _, err = cli(*TINY, *extra, "--out", run_dir)
        assert code == 0, err
        final = json.loads((run_dir / "final.json").read_text())
        losses[name] = final["loss"]
        config = json.loads((run_dir / "config.json").read_text())
        assert config["kernels"] == ({"attention": "flash"} if extra else {})
        assert ("gpt-kernel-flash" in config["versions"]) == bool(extra)
    assert losses["flash"] == pytest.approx(losses["own"], abs=1e-3)
    code, out, _ = cli("sample", tmp_path / "flash", "--device", "cpu", "--prompt", "3142")
    assert code == 0 and out.startswith("3142 -> ")
