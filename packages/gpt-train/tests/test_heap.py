"""The heap that keeps what a step frees (`gpt_train.heap`): no page faults for reused memory, the same bits."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import TINY

from gpt_train.heap import GLIBC_VARIABLES, TUNABLES, _on_glibc, keep_freed_memory
from gpt_viz import RunLayout

glibc_only = pytest.mark.skipif(not _on_glibc(), reason="the thresholds are glibc's malloc's")

# The page faults of ten training steps of the default sort model's shape (2 layers, 64 dimensions, batch 128,
# 11 positions), after ten steps that settle the heap.
FAULTS_OF_TEN_STEPS = """
import resource, sys, torch
from gpt_core import GPT, GPTConfig
from gpt_train.heap import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64))
optimizer = torch.optim.AdamW(model.parameters(), fused=True)
def step():
    x = torch.randint(10, (128, 11))
    optimizer.zero_grad()
    model(x, x.roll(-1, dims=1)).loss.backward()
    optimizer.step()
for _ in range(10):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def environment_without_glibc_variables() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in (*GLIBC_VARIABLES, TUNABLES)}


def page_faults(heap: str) -> int:
    env = environment_without_glibc_variables()
    command = [sys.executable, "-c", FAULTS_OF_TEN_STEPS, heap]
    return int(subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout)


@glibc_only
def test_memory_a_step_frees_serves_the_next_step_without_page_faults():
    glibc_default, kept = page_faults("glibc"), page_faults("kept")
    assert kept < 10 * 100, (kept, glibc_default)  # under 100 faults a step, of a step's few MiB of buffers
    assert 5 * kept < glibc_default, (kept, glibc_default)


@glibc_only
def test_the_thresholds_are_set_on_glibc_unless_its_own_variables_are(monkeypatch):
    for name in (*GLIBC_VARIABLES, TUNABLES):
        monkeypatch.delenv(name, raising=False)
    assert keep_freed_memory()
    for name in GLIBC_VARIABLES:
        with monkeypatch.context() as patched:
            patched.setenv(name, "131072")
            assert not keep_freed_memory()


@glibc_only
@pytest.mark.parametrize(
    ("tunables", "kept"),
    [
        ("glibc.malloc.trim_threshold=131072", False),
        ("glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=131072", False),
        ("glibc.malloc.top_pad=0", False),
        ("glibc.malloc.arena_max=2", True),  # no threshold: ours are set
        ("glibc.cpu.hwcaps=-AVX512F", True),
    ],
)
def test_the_thresholds_are_left_to_glibc_tunables_that_set_them(monkeypatch, tunables, kept):
    for name in GLIBC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(TUNABLES, tunables)
    assert keep_freed_memory() is kept


def trained_weights(out, env: dict[str, str]) -> dict[str, torch.Tensor]:
    command = [sys.executable, "-m", "gpt_train", *TINY, "--out", str(out)]
    subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return load_file(out / RunLayout.CHECKPOINT)


@glibc_only
def test_a_run_trains_to_the_same_bits_on_either_heap(tmp_path):
    env = environment_without_glibc_variables()
    kept = trained_weights(tmp_path / "kept", env)
    glibc_default = trained_weights(tmp_path / "glibc", env | {name: "131072" for name in GLIBC_VARIABLES[:2]})
    assert kept.keys() == glibc_default.keys()
    for name, tensor in kept.items():
        assert torch.equal(tensor, glibc_default[name]), name
