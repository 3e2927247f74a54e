"""A full AdamW training step on a GPU: gpt-core's GPT (the fast kernel set, and the triton set where the device
runs it; eager and compiled) against nanoGPT's own model.py, same shape, same optimiser, interleaved rounds in one
process. The reference set is left out on purpose: each piece as its plain-autograd definition, it is what the
fast set is pinned to, not a contender for speed (benchmarks/step_time.py --kernels reference times it on a CPU).

    python benchmarks/gpu_step.py --nanogpt ../nanoGPT                 # the table, on CUDA
    python benchmarks/gpu_step.py --nanogpt ../nanoGPT --shapes small  # the 6-layer shape only
    python benchmarks/gpu_step.py --nanogpt ../nanoGPT --device cpu --quick   # a rehearsal of the machinery

NANOGPT is a clone of karpathy/nanoGPT; only its model.py is imported. Both models are built with the same shape
(no biases, tied head, GPT-2's initialisation each), trained by the same `torch.optim.AdamW` (fused on CUDA, weight
decay 0.1 on matrices only, betas 0.9/0.95) with the gradient clipped to norm 1, TF32 on for both. A step is
zero_grad, forward with the loss (under bf16 autocast in the bf16 modes), backward, clip, optimiser step.

Each round times `--steps` steps of every model in turn (the order rotates), so all see the same machine; the table
gives each model's median step time, the median of the rounds' ratios to nanoGPT with their range, the MFU of
each, and the peak memory of each measured alone, once per mode after the timing (the model, its optimiser and one
step, nothing else allocated): every other model is freed and the compiler's caches cleared, then a first step
compiles and allocates AdamW's moments, and the peak of the two steps after it, above what was allocated before
the model, is the figure. On a CPU the same steps run and the column reads n/a (its allocator keeps no counts).
MFU is nanoGPT's own formula: 6N + 12 L H Q T FLOPs per token (N the parameters without the position table, L
layers, H heads, Q head size, T the block), against the bf16 matrix-product peak measured in the same run (the
best of 8,192-square products), so the percentage is of what this GPU reaches, not of a data-sheet figure.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    ArgumentParser,
    StreamedTable,
    checked_device,
    positive_int,
    progress,
    synchronize,
)

from gpt_core import GPT, KERNEL_SETS, GPTConfig  # noqa: E402
from gpt_core.compiling import compiled  # noqa: E402
from gpt_train.kernels import triton_runs_on  # noqa: E402


@dataclass(frozen=True)
class Shape:
    n_layer: int
    n_head: int
    n_embd: int
    block: int
    batch: int
    vocab: int
    dropout: float
    modes: tuple[str, ...]  # "fp32", "bf16", "bf16+compile"


SHAPES = {
    "small": Shape(6, 6, 384, 256, 64, 65, 0.2, ("fp32", "bf16", "bf16+compile")),  # nanoGPT's shakespeare_char
    "gpt2": Shape(12, 12, 768, 1024, 16, 50304, 0.0, ("bf16", "bf16+compile")),  # GPT-2 124M
}
QUICK = {"quick": Shape(2, 2, 32, 16, 4, 65, 0.2, ("fp32", "fp32+compile"))}
TIMED_SETS = [name for name in KERNEL_SETS if name != "reference"]
"""The kernel sets this table times: not the reference set, the plain-autograd definitions the fast set is pinned to."""


def load_nanogpt(path: Path):
    """nanoGPT's model.py from a clone, as a module."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", path / "model.py")
    if spec is None or not (path / "model.py").is_file():
        sys.exit(f"gpu_step: {path} has no model.py (give a clone of karpathy/nanoGPT)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(side: str, shape: Shape, nanogpt, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    if side == "nanoGPT":
        config = nanogpt.GPTConfig(block_size=shape.block, vocab_size=shape.vocab, n_layer=shape.n_layer,
                                   n_head=shape.n_head, n_embd=shape.n_embd, dropout=shape.dropout,
                                   bias=False)  # fmt: skip
        with contextlib.redirect_stdout(sys.stderr):  # its "number of parameters" line, kept out of the table
            return nanogpt.GPT(config).to(device)
    config = GPTConfig(vocab_size=shape.vocab, block_size=shape.block, n_layer=shape.n_layer, n_head=shape.n_head,
                       n_embd=shape.n_embd, dropout=shape.dropout, bias=False)  # fmt: skip
    return GPT(config, KERNEL_SETS[side.split()[1]]).to(device)  # side: "ours fast", "ours triton", ...


def optimiser(model: torch.nn.Module, device: torch.device) -> torch.optim.Optimizer:
    """AdamW as nanoGPT configures it: decay on matrices only, fused where the device has it."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]  # fmt: skip
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), fused=device.type == "cuda")


def loss_of(output) -> torch.Tensor:
    return output[1] if isinstance(output, tuple) else output.loss  # nanoGPT: (logits, loss); ours: GPTOutput


def make_step(model: torch.nn.Module, mode: str, shape: Shape, device: torch.device):
    forward = compiled(model) if mode.endswith("+compile") else model
    opt = optimiser(model, device)
    bf16 = mode.startswith("bf16")
    generator = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randint(0, shape.vocab, (shape.batch, shape.block), generator=generator).to(device)
    y = torch.randint(0, shape.vocab, (shape.batch, shape.block), generator=generator).to(device)
    model.train()

    def step() -> float:
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(forward(x, y))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return step


def bf16_peak_tflops(device: torch.device, n: int = 8192, repeats: int = 20) -> float:
    """The best bf16 matrix-product rate this device reaches, TFLOP/s (fp32 on a CPU, at a smaller size)."""
    dtype, n = (torch.bfloat16, n) if device.type == "cuda" else (torch.float32, 512)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = 0.0
    for _ in range(3):
        a @ b
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        synchronize(device)
        best = max(best, 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12)
    return best


def flops_per_step(shape: Shape) -> float:
    """nanoGPT's estimate_mfu: 6N + 12 L H Q T per token, N without the position table."""
    c = GPTConfig(vocab_size=shape.vocab, block_size=shape.block, n_layer=shape.n_layer, n_head=shape.n_head,
                  n_embd=shape.n_embd, bias=False)  # fmt: skip
    n_params = GPT(c, KERNEL_SETS["reference"]).num_parameters() - shape.block * shape.n_embd
    per_token = 6 * n_params + 12 * shape.n_layer * shape.n_head * (shape.n_embd // shape.n_head) * shape.block
    return per_token * shape.block * shape.batch


def free_device_memory(device: torch.device) -> None:
    """Free what earlier models left: Python's cycles, the compiler's caches (compiled graphs), the CUDA allocator's
    cached blocks."""
    gc.collect()
    torch.compiler.reset()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_memory_mib(side: str, mode: str, shape: Shape, nanogpt, device: torch.device) -> float | None:
    """Peak memory of one side alone, MiB: its model, AdamW's state and one training step, everything else freed
    first. The first step (compilation, the moments' first allocation) runs before the peak is reset, the peak is
    of the two after it. None on a device whose allocator keeps no counts (a CPU), where the same steps still run."""
    free_device_memory(device)
    cuda = device.type == "cuda"
    base = torch.cuda.memory_allocated(device) if cuda else 0
    if base:
        progress(f"  peak memory of {side}: {base / 2**20:,.0f} MiB allocated before its model, not counted")
    step = make_step(build(side, shape, nanogpt, device), mode, shape, device)
    step()
    synchronize(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)  # from here the peak starts at the model, its moments, its batch
    for _ in range(2):
        step()
    synchronize(device)
    peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if cuda else None
    del step
    free_device_memory(device)
    return peak


def timed_rounds(shape_name: str, shape: Shape, mode: str, sides: list[str], nanogpt, device, args):
    """Milliseconds per step of each side, per round; the models are freed when it returns."""
    free_device_memory(device)
    steps = {side: make_step(build(side, shape, nanogpt, device), mode, shape, device) for side in sides}
    for side in sides:  # warm-up: compilation, autotuning, the allocator's pools
        for _ in range(args.warmup):
            steps[side]()
        synchronize(device)
        progress(f"  {shape_name} {mode}: {side} warmed up")
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(args.rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        for side in order:
            synchronize(device)
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[side]()
            synchronize(device)
            times[side].append((time.perf_counter() - start) / args.steps * 1e3)
    return times


def time_mode(shape_name: str, shape: Shape, mode: str, sides: list[str], nanogpt, device, args, peak: float):
    times = timed_rounds(shape_name, shape, mode, sides, nanogpt, device, args)
    memory = {side: peak_memory_mib(side, mode, shape, nanogpt, device) for side in sides}  # each side once
    flops = flops_per_step(shape)
    their_ms = statistics.median(times["nanoGPT"])
    rows = []
    for side in sides:
        if side == "nanoGPT":
            continue
        ratios = [ours / theirs for ours, theirs in zip(times[side], times["nanoGPT"], strict=True)]
        ours_ms = statistics.median(times[side])
        rows.append([
            shape_name, mode, side.split()[1], f"{ours_ms:.2f}", f"{their_ms:.2f}",
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
            f"{flops / ours_ms / 1e9 / peak:.1%} / {flops / their_ms / 1e9 / peak:.1%}",
            "n/a" if memory[side] is None else f"{memory[side]:,.0f} / {memory['nanoGPT']:,.0f}",
        ])  # fmt: skip
    return rows


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu for a rehearsal (default cuda)")
    parser.add_argument("--shapes", help=f"comma-separated, of: {', '.join(SHAPES)} (default: {','.join(SHAPES)})")
    parser.add_argument("--kernels", default=None,
                        help=f"kernel sets, comma-separated, of: {', '.join(TIMED_SETS)} (default: each the device "
                        "runs)")  # fmt: skip
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--steps", type=positive_int, default=10, help="steps per side per round")
    parser.add_argument("--warmup", type=positive_int, default=5, help="untimed steps of each side first")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny shape of its own, fp32 eager and compiled: a rehearsal on any device")  # fmt: skip
    args = parser.parse_args()
    device = checked_device(parser, args.device)
    sets = checked_sets(parser, args.kernels, device)
    if args.quick and args.shapes:
        parser.error("--quick times a tiny shape of its own; give --shapes or --quick, not both")
    shapes = (
        QUICK
        if args.quick
        else {name: SHAPES[name] for name in checked_shapes(parser, args.shapes or ",".join(SHAPES))}
    )
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    nanogpt = load_nanogpt(args.nanogpt.resolve())
    sides = ["nanoGPT", *(f"ours {name}" for name in sets)]
    peak = bf16_peak_tflops(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.version.__version__}; {args.rounds} rounds of {args.steps} steps; "
          f"peak {peak:.1f} TFLOP/s (measured {'bf16' if device.type == 'cuda' else 'fp32'} matmul)")  # fmt: skip
    # Each row as soon as its mode is measured: a run stopped by a time limit keeps the rows it finished.
    header = ["shape", "mode", "kernels", "ours ms", "nanoGPT ms", "ours / nanoGPT (range)", "MFU ours / nanoGPT",
              "peak MiB ours / nanoGPT"]  # fmt: skip
    table = StreamedTable(header, [5, 12, 6, 7, 10, 22, 18, 23])
    for shape_name, shape in shapes.items():
        for mode in shape.modes:
            for row in time_mode(shape_name, shape, mode, sides, nanogpt, device, args, peak):
                table.row(row)


def checked_sets(parser: argparse.ArgumentParser, kernels: str | None, device: torch.device) -> list[str]:
    """The kernel sets to time (default: each of TIMED_SETS the device runs); a name this table does not time, or a
    set the device cannot run, exits with one line before anything is built."""
    if kernels is None:
        return [name for name in TIMED_SETS if name != "triton" or triton_runs_on(device)]
    sets = kernels.split(",")
    for name in sets:
        if name == "reference":
            why = "the reference set (plain-autograd definitions, the fast set's yardstick) is no contender for speed"
            parser.exit(2, f"gpu_step.py: --kernels reference is left out on purpose: {why} (benchmarks/step_time.py "
                        f"--kernels reference times it on a CPU); choose among {', '.join(TIMED_SETS)}\n")  # fmt: skip
        if name not in TIMED_SETS:
            missing = " (the triton set needs Triton installed: gpt-core[triton])" if name == "triton" else ""
            parser.exit(2, f"gpu_step.py: no kernel set {name!r}{missing}; choose among {', '.join(TIMED_SETS)}\n")
        if name == "triton" and not triton_runs_on(device):
            parser.exit(2, f"gpu_step.py: --kernels triton runs on CUDA GPUs of compute capability 8.0 or later (its "
                        f"kernels are compiled and checked for sm_80 and sm_90), not this {device.type} device; leave "
                        "it out there, as the default does\n")  # fmt: skip
    return sets


def checked_shapes(parser: argparse.ArgumentParser, shapes: str) -> list[str]:
    """The --shapes names, each one of SHAPES, or one line and exit 2."""
    names = shapes.split(",")
    for name in names:
        if name not in SHAPES:
            parser.exit(2, f"gpu_step.py: no shape {name!r}; choose among {', '.join(SHAPES)}\n")
    return names


if __name__ == "__main__":
    main()
