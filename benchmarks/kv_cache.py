"""KV cache: tokens/s of greedy generation with and without the cache, and a check that both agree.

    python benchmarks/kv_cache.py                 # 255 new tokens, batch 1 and 64 (20 minutes on 2 idle cores)
    python benchmarks/kv_cache.py --batches 1     # a minute or two
    python benchmarks/kv_cache.py --quick         # smoke test: batch 1, 8 tokens, 2 rounds

Models: a 6-layer, 6-head, 384-dim, block-256 GPT (prompt of 1 token, 255 new ones, filling the
block) and the sort model (2 layers, 4 heads, 64 dims; prompt of 6 digits, 6 new tokens, as in
its evaluation). Weights are random: speed does not depend on what was learned, and greedy
decoding of the same weights must give the same tokens either way.

Rounds: the cached and the uncached generation take turns (alternating which goes first; a side
whose generation takes milliseconds repeats it for about half a second), each round gives its own
speedup, and the table prints the median speedup and, in brackets, the lowest and highest round's.
Every configuration gets `--rounds` rounds, except that one whose rounds are slow (the uncached
batch-64 pass takes minutes) stops after `--min-rounds` once it has used `--budget` seconds.
Progress goes to stderr: a line per round, and a line every 30 s inside a long pass.

The last columns bound what a cache can give here. A cached step at batch 1 must read every
weight once per token. "weights floor" is every Linear of the model applied to one (batch, in)
input, nothing else (the model's own route for those products), so a cached step cannot beat it,
and "ceiling" is the uncached time per token divided by it (both measured in every round). "memory
pass" is one sum over every weight: how fast this machine can read them at all.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    Spread,
    add_heap_option,
    peak_rss_mib,
    print_table,
    progress,
    ratio_spread,
    synchronize,
    use_heap,
)

from gpt_core import GPT, GPTConfig, Linear, generate  # noqa: E402

MODELS = {
    "6L-6H-384d, block 256": (GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384), 1),
    "sort (2L-4H-64d)": (GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64), 6),
}
HEARTBEAT = 30.0  # seconds between progress lines inside one long generation
ROUND_SECONDS = 0.5  # a fast configuration repeats each side's generation in a round until about this long


def timed_generate(
    model: GPT, prompt: torch.Tensor, n_new: int, use_cache: bool, calls: int = 1
) -> tuple[torch.Tensor, float]:
    """The generated tokens and the seconds per generation, over `calls` generations in a row."""
    synchronize(prompt.device)
    start = time.perf_counter()
    for _ in range(calls):
        out = generate(model, prompt, n_new, temperature=0.0, use_cache=use_cache)
    synchronize(prompt.device)
    return out, (time.perf_counter() - start) / calls


def seconds_per_call(fn: Callable[[], object], device: torch.device, repeats: int = 50) -> float:
    for _ in range(3):
        fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / repeats


@torch.no_grad()
def weight_read_times(model: GPT, batch: int) -> tuple[float, float]:
    """Seconds for every Linear of `model` applied to one (batch, in) input (one token's products),
    and for one plain sum over the same weights (one token's weight reads at memory speed)."""
    device = model.lm_head.weight.device
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    inputs = [torch.randn(batch, m.in_features, device=device) for m in linears]

    def project_once() -> None:
        for linear, x in zip(linears, inputs, strict=True):
            linear(x)

    def read_once() -> None:
        for linear in linears:
            linear.weight.sum()

    return seconds_per_call(project_once, device), seconds_per_call(read_once, device)


class Heartbeat:
    """Counts the model's forward calls (one per generated token) and prints a line every HEARTBEAT
    seconds: the only sign of life during an uncached pass that takes minutes. Attached to uncached
    passes only; its cost (a few microseconds a call) is far below one uncached step."""

    def __init__(self, model: GPT, label: str, n_new: int) -> None:
        self.model, self.label, self.n_new = model, label, n_new

    def __enter__(self) -> Heartbeat:
        self.calls, self.start = 0, time.perf_counter()
        self.last = self.start
        self.handle = self.model.register_forward_hook(self.tick)
        return self

    def tick(self, *_: object) -> None:
        self.calls += 1
        now = time.perf_counter()
        if now - self.last >= HEARTBEAT:
            self.last = now
            progress(f"    {self.label}: {self.calls}/{self.n_new} tokens, {now - self.start:.0f} s")

    def __exit__(self, *_: object) -> None:
        self.handle.remove()


def measure(name: str, config: GPTConfig, prompt_len: int, batch: int, args: argparse.Namespace) -> list[str]:
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = GPT(config).to(device).eval()
    n_new = min(args.tokens, config.block_size + 1 - prompt_len)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(config.vocab_size, (batch, prompt_len), generator=gen).to(device)
    timed_generate(model, prompt, 2, True)  # warm up
    timed_generate(model, prompt, 2, False)
    _, first = timed_generate(model, prompt, n_new, False)
    calls = max(1, int(ROUND_SECONDS / first))  # the sort model's generations take milliseconds
    label = f"{name}, batch {batch}" + (f", {calls} generations a side per round" if calls > 1 else "")
    cached_s, uncached_s, floors, memory_passes = [], [], [], []
    identical = True
    started = time.perf_counter()
    for r in range(args.rounds):
        sides = (True, False) if r % 2 == 0 else (False, True)
        outputs = {}
        for use_cache in sides:
            if use_cache:
                outputs[True], seconds = timed_generate(model, prompt, n_new, True, calls)
                cached_s.append(seconds)
            else:
                with Heartbeat(model, f"round {r + 1} no cache", n_new * calls):
                    outputs[False], seconds = timed_generate(model, prompt, n_new, False, calls)
                uncached_s.append(seconds)
        identical &= torch.equal(outputs[True], outputs[False])
        floor, memory_pass = weight_read_times(model, batch)
        floors.append(floor)
        memory_passes.append(memory_pass)
        progress(f"{label}: round {r + 1}/{args.rounds}: no cache {uncached_s[-1]:.3g} s, "
                 f"cache {cached_s[-1]:.3g} s, speedup {uncached_s[-1] / cached_s[-1]:.1f}x")  # fmt: skip
        if r + 1 >= args.min_rounds and time.perf_counter() - started > args.budget and r + 1 < args.rounds:
            progress(f"{label}: {r + 1} rounds in {time.perf_counter() - started:.0f} s (over --budget); stopping")
            break
    tokens = batch * n_new
    t_cached, t_uncached = statistics.median(cached_s), statistics.median(uncached_s)
    speedup = ratio_spread(uncached_s, cached_s)
    ceiling = Spread.of([u / n_new / f for u, f in zip(uncached_s, floors, strict=True)])
    return [name, batch, n_new, speedup.n, f"{tokens / t_uncached:,.0f}", f"{tokens / t_cached:,.0f}",
            speedup.ratio(), "yes" if identical else "NO", f"{t_cached / n_new * 1e3:.2f}",
            f"{statistics.median(floors) * 1e3:.2f}", ceiling.ratio(),
            f"{statistics.median(memory_passes) * 1e3:.2f}", f"{peak_rss_mib():.0f}"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=255, help="new tokens for the large model")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per configuration (default 5)")
    parser.add_argument("--min-rounds", type=int, default=3, help="rounds a configuration gets even past --budget")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per configuration before --min-rounds")
    parser.add_argument("--quick", action="store_true", help="smoke test: batch 1, 8 new tokens, 2 rounds")
    add_heap_option(parser)
    args = parser.parse_args()
    heap = use_heap(args.heap)
    if args.quick:
        args.batches, args.tokens, args.rounds, args.min_rounds = [1], 8, 2, 2
    args.min_rounds = min(args.min_rounds, args.rounds)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"torch {torch.__version__}, {where}, {heap}, greedy decoding, float32")
    print("speedup and ceiling: median over rounds (lowest-highest round); times and tokens/s: medians\n")
    rows = [
        measure(name, config, prompt_len, batch, args)
        for name, (config, prompt_len) in MODELS.items()
        for batch in args.batches
    ]
    print_table(HEADER, rows)


HEADER = ["model", "batch", "new tokens", "rounds", "tokens/s no cache", "tokens/s cache", "speedup", "identical",
          "cached ms/step", "weights floor ms", "ceiling", "memory pass ms", "peak RSS MiB"]  # fmt: skip

if __name__ == "__main__":
    main()
