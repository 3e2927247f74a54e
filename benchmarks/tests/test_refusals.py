"""The benchmarks refuse bad input with one line and a non-zero exit before they measure anything, and gpu_check.sh
refuses a pack built from other sources than the tree's, with its own exit code.

    python -m pytest -q benchmarks/tests
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parent
sys.path.insert(0, str(BENCHMARKS))
import pack_sources  # noqa: E402

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA, so asking for it is no error")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = os.environ | {"OMP_NUM_THREADS": "1"} | (env or {})
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=environment, timeout=300)


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], *fragments: str, code: int = 2) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    ("script", "args", "fragment"),
    [
        ("kernels.py", ["--rounds", "0"], "--rounds: 0 is below 1"),
        ("grokking_step.py", ["--steps", "0"], "--steps: 0 is below 1"),
        ("attention_memory.py", ["--lengths", "0"], "--lengths: 0 is below 1"),
        ("kv_cache.py", ["--tokens", "-3"], "--tokens: -3 is below 1"),
        ("kv_cache.py", ["--device", "bogus"], "unknown device 'bogus'"),
        ("text_prepare.py", ["--sizes", "0"], "--sizes: 0 is not a finite number above 0"),
        ("waits.py", ["--before", ".", "--waits", "bogus"], "no wait 'bogus'"),
        ("waits.py", ["--before", "/no/such/tree"], "holds no gpt_core package"),
        ("hooks_overhead.py", ["--before", "/no/such/tree"], "holds no gpt_core package"),
        ("sort_time_to_accuracy.py", ["--set", "pos=rope"], "go after --"),
    ],
)
def test_bad_arguments_are_one_line(script: str, args: list[str], fragment: str) -> None:
    assert_one_line_refusal(run(sys.executable, str(BENCHMARKS / script), *args), f"{script}: error:", fragment)


@NO_CUDA
@pytest.mark.parametrize("script", ["kv_cache.py", "attention_memory.py"])
def test_cuda_without_cuda_is_one_line(script: str) -> None:
    done = run(sys.executable, str(BENCHMARKS / script), "--device", "cuda")
    assert_one_line_refusal(done, "device 'cuda' is not available")


@NO_CUDA
def test_gpu_step_defaults_to_cuda_and_says_so(tmp_path: Path) -> None:
    done = run(sys.executable, str(BENCHMARKS / "gpu_step.py"), "--nanogpt", str(tmp_path), "--quick")
    assert_one_line_refusal(done, "device 'cuda' is not available")


def test_the_manifest_names_what_differs(tmp_path: Path) -> None:
    recorded = {"a.py": "1", "b.py": "2", "c.py": "3"}
    now = {"a.py": "1", "b.py": "changed", "d.py": "4"}
    assert pack_sources.differences(recorded, now) == [
        "b.py (changed)",
        "d.py (not in the pack)",
        "c.py (gone from the tree)",
    ]
    manifest = tmp_path / "sources.sha256"
    subprocess.run([sys.executable, str(BENCHMARKS / "pack_sources.py"), "write", str(manifest)], check=True)
    assert pack_sources.read_manifest(manifest) == pack_sources.manifest(ROOT)
    assert "packages/gpt-core/src/gpt_core/model.py" in pack_sources.read_manifest(manifest)


def test_gpu_check_refuses_a_stale_pack_with_exit_3(tmp_path: Path) -> None:
    """Before anything is installed: the wheels are never looked at, and the code is 3, not the tee's."""
    pack = tmp_path / "pack"
    (pack / "wheels").mkdir(parents=True)
    (pack / "wheels" / "stand_in-0-py3-none-any.whl").write_bytes(b"")
    manifest = dict(pack_sources.manifest(ROOT))
    manifest["packages/gpt-core/src/gpt_core/model.py"] = "0" * 64
    (pack / "sources.sha256").write_text("".join(f"{digest}  {name}\n" for name, digest in manifest.items()))
    out = tmp_path / "out"
    env = {"OUT": str(out), "DEVICE": "cpu", "PYTHON": sys.executable, "GPU_PACK": str(pack)}
    done = run("bash", str(BENCHMARKS / "gpu_check.sh"), env=env)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "packages/gpt-core/src/gpt_core/model.py (changed)" in done.stdout
    assert "bash benchmarks/gpu_pack.sh" in done.stdout
    assert "cannot start" in (out / "gpu_check.log").read_text()
    assert not (out / "steps.tsv").exists()
