"""Every task and command on CUDA and Apple MPS where this machine has them (skipped, with the reason, where not):
each built-in task trained, evaluated and sampled with and without the KV cache; the inspect report, the explorer
answering a prompt, export; snapshots, bf16 and fp16, gradient accumulation, --compile, torchrun with one process;
both example plugins; and `verify --device`. `benchmarks/gpu_check.sh` runs this file on a GPU. The first three
tests also run everywhere on `mps-stand-in`: the CPU standing in for MPS's lack of float64 (device_stand_in.py)."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from device_stand_in import OnDevice
from train_helpers import TINY, is_count_of, read_metrics

from gpt_tasks import get_task
from gpt_train.distributed import Unread
from gpt_train.lab.serve import LOOPBACK, Explorer, make_server
from gpt_viz import RunLayout

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the compiler's own, on importing it

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
MPS = pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device here")
ACCELERATORS = [pytest.param("cuda", marks=CUDA), pytest.param("mps", marks=MPS)]
WITH_STAND_IN = [*ACCELERATORS, "mps-stand-in"]


@pytest.fixture
def device(request):
    """The --device of a WITH_STAND_IN test: the accelerator's name, or for the stand-in "cpu" under OnDevice."""
    if request.param != "mps-stand-in":
        yield request.param
        return
    with OnDevice():
        yield "cpu"


SMALL = (
    "--quiet", "--steps", "20", "--batch-size", "16", "--set", "n_layer=1", "--set", "n_embd=32",
    "--set", "n_head=2", "--set", "eval_every=10", "--set", "eval_limit=64", "--set", "final_eval_limit=64",
    "--set", "checkpoint_every=10", "--no-pictures",
)  # fmt: skip
WORDS = [
    "the",
    "king",
    "and",
    "queen",
    "of",
    "all",
    "england",
    "shall",
    "speak",
    "to",
    "thee",
    "my",
    "lord",
    "good",
    "night",
    "sweet",
    "prince",
]


def corpus(folder: Path) -> Path:
    path = folder / "corpus.txt"
    rng = random.Random(0)
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(6000)) + "\n", encoding="utf-8")
    return path


TASKS = {  # each task's small settings; {corpus} is a text file written for the test
    "sort": ["--set", "length=4"],
    "addition": ["--set", "digits=2"],
    "modadd": ["--set", "p=13"],  # its evaluation computes the Fourier spectrum of the embedding
    "repeats": ["--set", "block_size=16", "--set", "vocab=16"],
    "shakespeare": ["--data", "{corpus}", "--set", "block_size=16"],
    "text": ["--data", "{corpus}", "--set", "block_size=16", "--set", "chunk_size=128"],
}


def train(cli, device: str, out: Path, task: str = "sort", *extra: str) -> Path:
    settings = [str(corpus(out.parent)) if arg == "{corpus}" else arg for arg in TASKS[task]]
    result = cli("run", "--task", task, "--device", device, *SMALL, *settings, *extra, "--out", out)
    assert result.code == 0, result.err
    return out


def on(device: str) -> list[str]:
    args = list(TINY)
    args[args.index("--device") + 1] = device
    return args


@pytest.mark.parametrize("device", WITH_STAND_IN, indirect=True)
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


@CUDA
def test_reading_a_steps_loss_waits_for_that_step_alone_not_for_the_work_queued_after_it():
    """The training loop reads step n's loss after queueing step n + 1: the read must not wait for step n + 1, here
    a kernel that keeps the GPU busy for about a second, queued after the loss."""
    torch.cuda.synchronize()  # nothing queued before the test
    unread = Unread(torch.full((), 3.0, device="cuda"))
    torch.cuda._sleep(2_000_000_000)  # GPU clock cycles
    start = time.perf_counter()
    assert unread.read() == 3.0
    waited = time.perf_counter() - start
    queued = torch.cuda.Event()
    queued.record()
    busy = not queued.query()
    torch.cuda.synchronize()
    assert busy and waited < 0.1, f"the read waited {waited:.3f} s"


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("device", WITH_STAND_IN, indirect=True)
def test_every_builtin_task_trains_evaluates_and_samples_on_the_accelerator(cli, tmp_path, device, task):
    run_dir = train(cli, device, tmp_path / task, task)
    final = json.loads((run_dir / RunLayout.FINAL).read_text())
    assert final["step"] == 20
    assert all(isinstance(value, (int, float)) for value in final.values())
    evaluated = cli("eval", run_dir, "--device", device, "--limit", "32")
    assert evaluated.code == 0, evaluated.err
    for cache in ([], ["--no-cache"]):
        sampled = cli("sample", run_dir, "--device", device, *cache)
        assert sampled.code == 0 and sampled.out.strip(), sampled.err


@pytest.mark.parametrize("device", WITH_STAND_IN, indirect=True)
def test_the_report_the_explorer_and_export_work_on_a_run_trained_on_the_accelerator(cli, tmp_path, device):
    run_dir = train(cli, device, tmp_path / "sort")
    reported = cli("inspect", run_dir, "report", "--device", device, "--examples", "64", "--pairs", "32")
    assert reported.code == 0, reported.err
    assert (run_dir / "report.html").exists()
    httpd = make_server(Explorer(run_dir, torch.device(device)), LOOPBACK, 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        connection = http.client.HTTPConnection(LOOPBACK, httpd.server_address[1], timeout=60)
        connection.request("GET", "/api/prompt?text=3141")
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["prompt"] == "3141"
    finally:
        httpd.shutdown()
        httpd.server_close()
    exported = cli("export", run_dir, tmp_path / "hf")
    assert exported.code == 0, exported.err
    assert (tmp_path / "hf" / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("device", "dtype"),
    [pytest.param("cuda", "bf16", marks=CUDA), pytest.param("cuda", "fp16", marks=CUDA)],
)
def test_mixed_precision_with_accumulation_and_snapshots_on_the_accelerator(cli, tmp_path, device, dtype):
    settings = ["--set", f"dtype={dtype}", "--set", "grad_accum=4", "--set", "snapshot_every=10"]
    run_dir = train(cli, device, tmp_path / "run", "sort", *settings)
    assert len(list((run_dir / "snapshots").glob("step-*.safetensors"))) == 3  # steps 0, 10 and 20
    losses = [record["loss"] for record in read_metrics(run_dir)]
    assert all(loss == loss for loss in losses)  # no nan


@pytest.mark.parametrize("device", ACCELERATORS)
def test_a_compiled_run_on_the_accelerator_passes_its_own_check_and_learns_as_the_eager_one(cli, tmp_path, device):
    steps = ("--steps", "60")
    eager = train(cli, device, tmp_path / "eager", "sort", *steps)
    compiled = train(cli, device, tmp_path / "compiled", "sort", *steps, "--compile")
    eager, compiled = (json.loads((run / RunLayout.FINAL).read_text()) for run in (eager, compiled))
    assert abs(compiled["loss"] - eager["loss"]) < 0.05 * eager["loss"]
    assert abs(compiled["heldout_token_accuracy"] - eager["heldout_token_accuracy"]) < 0.05


@pytest.mark.parametrize("device", ACCELERATORS)
def test_verify_on_the_accelerator_with_the_compiler(cli, device):
    compiling = ["--compile"] if device == "cuda" else []
    for kernel_set in ("fast", "reference"):
        result = cli("verify", "--device", device, "--kernels", kernel_set, "--seed", "0", *compiling)
        assert result.code == 0, result.out + result.err
        assert f"GPT forward and backward on {device}" in result.out


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=CUDA)])
def test_torchrun_with_one_process_trains_on_the_accelerator(tmp_path, device):
    run_dir = tmp_path / "ddp"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", "29527",
               "-m", "gpt_train", "run", "--task", "sort", "--device", device, *SMALL, *TASKS["sort"],
               "--out", str(run_dir)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[:4000]
    assert json.loads((run_dir / RunLayout.FINAL).read_text())["step"] == 20


def installed(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


@installed("gpt_task_reverse")
@pytest.mark.parametrize("device", ACCELERATORS)
def test_the_example_task_plugin_trains_on_the_accelerator(cli, tmp_path, device):
    result = cli("run", "--task", "reverse", "--device", device, *SMALL, "--out", tmp_path / "reverse")
    assert result.code == 0, result.err
    assert cli("sample", tmp_path / "reverse", "--device", device).code == 0


@installed("gpt_kernel_flash")
@pytest.mark.parametrize("device", ACCELERATORS)
def test_the_example_kernel_plugin_trains_on_the_accelerator(cli, tmp_path, device):
    run_dir = train(cli, device, tmp_path / "flash", "sort", "--kernel", "attention=flash")
    assert json.loads((run_dir / "config.json").read_text())["kernels"] == {"attention": "flash"}
    assert cli("eval", run_dir, "--device", device, "--limit", "32").code == 0
