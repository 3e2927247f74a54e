"""Peak memory of attention's forward and backward: gpt-core's plain kernel vs a tiled one (FlashAttention).

    python benchmarks/attention_memory.py                       # plain vs flash at T = 1,024, 2,048, 4,096
    python benchmarks/attention_memory.py --kernel attention=mymodule:attention --lengths 512 1024

Each measurement runs in a fresh process: q, k, v (B, H, T, d) are made, the peak resident set is reset
(Linux's /proc/self/clear_refs) and the kernel's forward and backward run once; "extra" is the peak minus the
resident memory just before, i.e. what the kernel's activations, saved tensors and gradients took. The
plain kernel forms (T, T) scores and probabilities per head, so its extra memory grows quadratically with T;
a tiled kernel keeps O(T d), so its extra memory should grow linearly (x2 per doubling of T, against x4).
Kernels take turns round by round; the table gives the median over rounds and the range.
On CUDA (--device cuda) the peak is torch.cuda.max_memory_allocated instead.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, Spread, checked_device, positive_int, print_table, progress  # noqa: E402

from gpt_core import DEFAULT_KERNELS  # noqa: E402

MIB = 2**20


def resident_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak since the last reset) of this process, in KiB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", status).group(1))


def measure_once(name: str, length: int, shape: tuple[int, int, int], device: str) -> float:
    """Bytes of extra peak memory of one forward and backward of kernel `name` at `length` positions."""
    kernel = DEFAULT_KERNELS.attention if name == "plain" else resolve(name)
    batch, heads, head_dim = shape
    q, k, v = (torch.randn(batch, heads, length, head_dim, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, heads, length, head_dim, device=device)
    small = [t[..., :64, :].detach().requires_grad_() for t in (q, k, v)]
    # Outside the measurement, whatever a first call loads: a first backward(grad) imports ~33 MiB of modules.
    kernel(*small, True).backward(grad[..., :64, :])
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # the peak resident set restarts from here
        before = resident_kib("VmRSS") * 1024
    kernel(q, k, v, True).backward(grad)
    if device == "cuda":
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    return resident_kib("VmHWM") * 1024 - before


def resolve(name: str):
    from gpt_train.kernels import resolve_kernel

    return resolve_kernel("attention", name)


def in_fresh_process(name: str, length: int, shape: tuple[int, int, int], device: str) -> float:
    """measure_once in a new Python process, so no allocation of an earlier measurement is counted."""
    args = [sys.executable, __file__, "--one", name, str(length), *map(str, shape), device]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"measuring {name} at T={length} failed:\n{done.stderr}")
    return json.loads(done.stdout)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--kernel",
        default="attention=flash",
        metavar="attention=NAME",
        help="the attention kernel to measure beside gpt-core's plain one (default attention=flash)",
    )
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--shape", type=positive_int, nargs=3, default=[1, 4, 64], metavar=("B", "H", "d"))
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--one", nargs=6, help=argparse.SUPPRESS)  # name, T, B, H, d, device: one measurement
    args = parser.parse_args()
    if args.one:
        name, length, b, h, d, device = args.one
        print(json.dumps(measure_once(name, int(length), (int(b), int(h), int(d)), device)))
        return
    checked_device(parser, args.device)  # before any child process: no CUDA here is one line, not a child's traceback
    slot, _, name = args.kernel.partition("=")
    if slot != "attention" or not name:
        parser.error("--kernel takes attention=NAME")
    from gpt_train.kernels import KernelError

    try:
        resolve(name)  # before any child process: a kernel that is not there is one line, not a child's traceback
    except KernelError as error:
        hint = "; pip install ./examples/gpt-kernel-flash" if name == "flash" else ""
        parser.exit(2, f"attention_memory.py: {error}{hint}\n")
    sides = ["plain", name]
    extra: dict[tuple[str, int], list[float]] = {(side, t): [] for side in sides for t in args.lengths}
    for r in range(args.rounds):
        for t in args.lengths:
            for side in sides if r % 2 == 0 else sides[::-1]:
                extra[(side, t)].append(in_fresh_process(side, t, tuple(args.shape), args.device) / MIB)
        progress(f"round {r + 1} of {args.rounds} done")
    b, h, d = args.shape
    print(f"torch {torch.__version__}, {args.device}; q, k, v (B, H, T, d) = ({b}, {h}, T, {d}) float32; "
          f"extra peak memory of one forward + backward, MiB: median of {args.rounds} rounds (range)\n")  # fmt: skip
    rows, previous = [], {}
    for t in args.lengths:
        row = [f"{t:,}"]
        for side in sides:
            spread = Spread.of(extra[(side, t)])
            growth = f"x{spread.median / previous[side]:.2f}" if previous.get(side) else "-"  # from 0 MiB: none
            row += [spread.plain(1), growth]
            previous[side] = spread.median
        theirs = statistics.median(extra[(name, t)])
        row.append(f"{statistics.median(extra[('plain', t)]) / theirs:.1f}" if theirs else "-")  # 0 MiB: no ratio
        rows.append(row)
    one_tt = b * h * 4 / MIB  # MiB of one float32 (B, H, T, T) tensor per T^2
    print_table(["T", "plain MiB", "growth", f"{name} MiB", "growth", "plain / " + name], rows)
    print(f"\none (B, H, T, T) float32 tensor: {one_tt * args.lengths[-1] ** 2:.0f} MiB at T = {args.lengths[-1]:,}; "
          "growth is the factor from the previous T (doubling T: x4 quadratic, x2 linear)")  # fmt: skip


if __name__ == "__main__":
    main()
