"""Training-step time: hand-written GPT vs its built-in twin, same weights, interleaved in one process.

    python benchmarks/step_time.py            # eager and compiled, both configurations
    python benchmarks/step_time.py --eager-only
    python benchmarks/step_time.py --by-kernel --configs shakespeare   # where the eager gap goes
    python benchmarks/step_time.py --kernel attention=flash            # a kernel beside gpt-core's and PyTorch's
    python benchmarks/step_time.py --kernels reference                 # the reference set against the fast set
    python benchmarks/step_time.py --precision                         # bf16 autocast and grad_accum vs fp32

Each round times `--steps-per-round` full AdamW steps of each model in turn (which model goes first
alternates), so both see the same machine load; the table reports each model's step time (median over rounds of the
round's mean step) and the median of the per-round ratios with their range (lowest-highest round). Model FLOP/s counts
6 x parameters x tokens and is compared with a large fp32 matmul measured in the same run, for the
hand-written model and (last column) for its built-in twin: what PyTorch's own kernels reach on the
same machine.

--kernels reference times the reference kernel set (gpt_core.reference: every piece in plain autograd) beside the
fast set (the default) and the built-in twin, same weights, and gives its ratio to each.

--precision times gpt-train's own step (gpt_train.accumulation, gpt_train.precision) on copies of one model:
fp32, bf16 autocast, and fp32 with the batch in 4 micro-batches (the same total batch), each as a ratio to
fp32 in the same round.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    ArgumentParser,
    Spread,
    add_heap_option,
    interleaved_rounds,
    matmul_peak_gflops,
    peak_rss_mib,
    positive_int,
    print_table,
    ratio_spread,
    use_heap,
)
from twin import KERNELS, builtin_twin  # noqa: E402

from gpt_core import GPT, KERNEL_SETS, GPTConfig, Kernels  # noqa: E402

CONFIGS = {
    # the sort task's defaults: 2 layers, 4 heads, 64 dims, 11 positions, batch 128
    "sort": (GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64), 128),
    # the small CPU shakespeare configuration: 4 layers, 4 heads, 128 dims, block 64, batch 12
    "shakespeare": (GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128), 12),
}


def make_step(model: GPT, batch: int, block: int, vocab: int, compile_: bool):
    forward = torch.compile(model) if compile_ else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as gpt-train runs it
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        x = torch.randint(vocab, (batch, block), generator=gen)
        loss = forward(x, torch.roll(x, -1, dims=1)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def step_times(
    models: dict[str, GPT], name: str, compile_: bool, rounds: int, per_round: int
) -> tuple[dict[str, list[float]], float]:
    """Seconds per training step of each model in each round (the mean of `per_round` steps), the
    models taking turns round by round; and the seconds spent warming up (and compiling)."""
    config, batch = CONFIGS[name]
    steps = {label: make_step(m, batch, config.block_size, config.vocab_size, compile_) for label, m in models.items()}
    start = time.perf_counter()
    for step in steps.values():
        for _ in range(3):
            step()
    warmup = time.perf_counter() - start
    times = interleaved_rounds(list(steps.values()), rounds, calls=per_round)
    return dict(zip(steps, times, strict=True)), warmup


def measure(name: str, compile_: bool, rounds: int, per_round: int, peak: float) -> list[str]:
    config, batch = CONFIGS[name]
    torch.manual_seed(0)
    hand = GPT(config)
    times, warmup = step_times({"hand": hand, "builtin": builtin_twin(hand)}, name, compile_, rounds, per_round)
    hand_ms, twin_ms = (statistics.median(times[label]) * 1e3 for label in ("hand", "builtin"))
    ratio = Spread.of([h / t for h, t in zip(times["hand"], times["builtin"], strict=True)])
    tokens = batch * config.block_size
    flops = 6 * hand.num_parameters() * tokens
    gflops, twin_gflops = (flops / (ms / 1e3) / 1e9 for ms in (hand_ms, twin_ms))
    mode = "compiled" if compile_ else "eager"
    return [name, mode, f"{hand_ms:.2f}", f"{twin_ms:.2f}", ratio.plain(), f"{gflops:.1f}",
            f"{gflops / peak:.0%}", f"{twin_gflops / peak:.0%}", f"{warmup:.1f}", f"{peak_rss_mib():.0f}"]  # fmt: skip


def by_kernel(name: str, rounds: int, per_round: int) -> None:
    """Eager step time with one kind of kernel swapped for its built-in: where the hand-written time goes.
    "ms saved" is the median over rounds of (hand-written - swapped) in the same round, with its range."""
    torch.manual_seed(0)
    hand = GPT(CONFIGS[name][0])
    models = {"hand-written": hand} | {f"built-in {kind}": builtin_twin(hand, kind) for kind in KERNELS}
    times, _ = step_times(models | {"built-in all four": builtin_twin(hand)}, name, False, rounds, per_round)
    base = times["hand-written"]
    rows = []
    for label, seconds in times.items():
        saved = Spread.of([(b - s) * 1e3 for b, s in zip(base, seconds, strict=True)])
        rows.append([name, label, f"{statistics.median(seconds) * 1e3:.2f}", saved.plain(2)])
    print_table(["config", "eager step", "ms", "ms saved (range)"], rows)
    print(f"peak RSS {peak_rss_mib():.0f} MiB\n")


TWIN_KINDS = {"attention": "attention", "layer_norm": "layernorm", "gelu": "gelu", "cross_entropy": "loss"}
"""Each kernel slot a training step calls, as the kind of kernel the built-in twin swaps for PyTorch's."""


def with_kernel(name: str, slot: str, kernel: str, kernels: Kernels, rounds: int, per_round: int) -> list[str]:
    """Eager step time with `kernels` (`kernel` in `slot`), beside gpt-core's own kernel and PyTorch's, same weights."""
    torch.manual_seed(0)
    hand = GPT(CONFIGS[name][0])
    swapped = GPT(CONFIGS[name][0], kernels)
    swapped.load_state_dict(hand.state_dict())
    models = {"gpt-core": hand, kernel: swapped, "PyTorch": builtin_twin(hand, TWIN_KINDS[slot])}
    times, _ = step_times(models, name, False, rounds, per_round)
    ms = [f"{statistics.median(times[label]) * 1e3:.2f}" for label in models]
    ratios = [ratio_spread(times[kernel], times[other]).plain() for other in ("gpt-core", "PyTorch")]
    return [name, *ms, *ratios]


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=positive_int, default=12, help="rounds (default 12)")
    parser.add_argument(
        "--steps-per-round", type=positive_int, default=5, help="steps of each model per round (default 5)"
    )
    parser.add_argument("--eager-only", action="store_true")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--by-kernel", action="store_true",
                        help="eager only: swap one kind of hand-written kernel at a time for its built-in")  # fmt: skip
    parser.add_argument("--precision", action="store_true",
                        help="eager only: bf16 autocast and grad_accum 4 against fp32, as gpt-train steps")  # fmt: skip
    parser.add_argument("--kernel", metavar="SLOT=NAME",
                        help="eager only: time this kernel (installed, or module:function) beside gpt-core's own "
                        "and PyTorch's")  # fmt: skip
    parser.add_argument("--kernels", choices=[name for name in KERNEL_SETS if name != "fast"],
                        help="eager only: time this kernel set beside the fast set and PyTorch's")  # fmt: skip
    add_heap_option(parser)
    args = parser.parse_args()
    args.setting = f"torch {torch.__version__}, {torch.get_num_threads()} threads, {use_heap(args.heap)}"
    if args.kernels:
        check_kernel_set_runs_here(parser, args.kernels)
        time_kernel_set(args)
        return
    if args.kernel:
        time_kernel(args)
        return
    if args.precision:
        time_precision(args)
        return
    if args.by_kernel:
        print(f"{args.setting}\n")
        for name in args.configs:
            by_kernel(name, args.rounds, args.steps_per_round)
        return
    peak = matmul_peak_gflops()
    print(f"{args.setting}; fp32 matmul peak {peak:.0f} GFLOP/s\n")
    rows = []
    for compile_ in (False,) if args.eager_only else (False, True):
        for name in args.configs:
            rows.append(measure(name, compile_, args.rounds, args.steps_per_round, peak))
    print(f"{args.rounds} rounds of {args.steps_per_round} steps of each model; ratio: median over rounds (range)\n")
    header = ["config", "mode", "hand ms", "built-in ms", "ratio (range)", "model GFLOP/s", "of peak",
              "built-in of peak", "warmup s", "peak RSS MiB"]  # fmt: skip
    print_table(header, rows)


def time_kernel(args: argparse.Namespace) -> None:
    """The --kernel table: one row per configuration."""
    from gpt_train.kernels import KernelError, checked_kernels, parse_kernel_choices  # only this table needs gpt-train

    try:
        choices = parse_kernel_choices([args.kernel])
        kernels = checked_kernels(choices, dropout=0.0, seed=0)
    except KernelError as error:
        raise SystemExit(f"step_time.py: {error}") from None
    slot, kernel = next(iter(choices.items()), (None, None))  # None: gpt-core's own
    if slot not in TWIN_KINDS:
        raise SystemExit(f"--kernel takes a kernel other than gpt-core's for {', '.join(TWIN_KINDS)}: a step's slots")
    rows = [with_kernel(name, slot, kernel, kernels, args.rounds, args.steps_per_round) for name in args.configs]
    print(f"{args.setting}; eager training step with {slot}={kernel}")
    print(f"{args.rounds} rounds of {args.steps_per_round} steps of each model; ratio: median over rounds (range)\n")
    header = ["config", "gpt-core ms", f"{kernel} ms", "PyTorch ms", f"{kernel} / gpt-core", f"{kernel} / PyTorch"]
    print_table(header, rows)
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


def check_kernel_set_runs_here(parser: argparse.ArgumentParser, name: str) -> None:
    """One line and exit 2 for a kernel set this CPU cannot run (the triton set outside Triton's interpreter)."""
    from gpt_train.kernels import triton_runs_on  # only this table needs gpt-train

    if name == "triton" and not triton_runs_on(torch.device("cpu")):
        parser.exit(2, "step_time.py: --kernels triton runs on CUDA (Triton compiles its kernels for the GPU) and this "
                    "table runs on the CPU; time it on a GPU with benchmarks/gpu_step.py, or here in Triton's "
                    "interpreter with TRITON_INTERPRET=1 (far slower)\n")  # fmt: skip


def time_kernel_set(args: argparse.Namespace) -> None:
    """The --kernels table: the set against the fast set and the built-in twin, one row per configuration."""
    name = args.kernels
    print(f"{args.setting}; eager training step, {name} kernels")
    print(f"{args.rounds} rounds of {args.steps_per_round} steps of each model; ratio: median over rounds (range)\n")
    rows = []
    for config_name in args.configs:
        torch.manual_seed(0)
        fast = GPT(CONFIGS[config_name][0])
        other = GPT(CONFIGS[config_name][0], KERNEL_SETS[name])
        other.load_state_dict(fast.state_dict())
        models = {"fast": fast, name: other, "PyTorch": builtin_twin(fast)}
        times, _ = step_times(models, config_name, False, args.rounds, args.steps_per_round)
        ms = [f"{statistics.median(times[label]) * 1e3:.2f}" for label in models]
        ratios = [ratio_spread(times[name], times[base]).plain() for base in ("fast", "PyTorch")]
        rows.append([config_name, *ms, *ratios])
    print_table(["config", "fast ms", f"{name} ms", "PyTorch ms", f"{name} / fast", f"{name} / PyTorch"], rows)
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


PRECISION_VARIANTS = {"fp32": ("fp32", 1), "bf16 autocast": ("bf16", 1), "fp32, grad_accum 4": ("fp32", 4)}
"""--precision's rows: (dtype, grad_accum) as TrainSettings names them."""


def gpt_train_step(model: GPT, batch: int, config: GPTConfig, dtype: str, grad_accum: int):
    """One gpt-train optimiser step: the batch through `accumulate_gradients` under `dtype`, then fused AdamW."""
    from gpt_tasks import Batch  # only this table needs gpt-train
    from gpt_train.accumulation import accumulate_gradients
    from gpt_train.precision import Precision

    precision = Precision(dtype, torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        x = torch.randint(config.vocab_size, (batch, config.block_size), generator=gen)
        optimizer.zero_grad()
        loss_of = lambda i, t, read: model(i, t, read=read).loss
        accumulate_gradients(loss_of, Batch(x, torch.roll(x, -1, dims=1)), grad_accum, precision, torch.device("cpu"))
        optimizer.step()

    return step


def time_precision(args: argparse.Namespace) -> None:
    """The --precision table: per configuration, each variant's step time and its ratio to fp32's."""
    rows = []
    for name in args.configs:
        config, batch = CONFIGS[name]
        torch.manual_seed(0)
        model = GPT(config)
        steps = [gpt_train_step(copy.deepcopy(model), batch, config, *v) for v in PRECISION_VARIANTS.values()]
        for step in steps:
            for _ in range(3):
                step()
        times = interleaved_rounds(steps, args.rounds, calls=args.steps_per_round)
        for label, seconds in zip(PRECISION_VARIANTS, times, strict=True):
            ratio = ratio_spread(seconds, times[0]).plain() if seconds is not times[0] else "1"
            rows.append([name, str(batch), label, f"{statistics.median(seconds) * 1e3:.2f}", ratio])
    print(f"{args.setting}; eager gpt-train steps")
    print(f"{args.rounds} rounds of {args.steps_per_round} steps of each; ratio to fp32: median over rounds (range)\n")
    print_table(["config", "batch", "step", "ms", "/ fp32 (range)"], rows)
    print(f"peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
