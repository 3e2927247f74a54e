"""KV cache: tokens/s of greedy generation with and without the cache, and a check that both agree.

    python benchmarks/kv_cache.py                 # 255 new tokens, batch 1 and 64
    python benchmarks/kv_cache.py --batches 1     # quicker

Models: a 6-layer, 6-head, 384-dim, block-256 GPT (prompt of 1 token, 255 new ones, filling the
block) and the sort model (2 layers, 4 heads, 64 dims; prompt of 6 digits, 6 new tokens, as in
its evaluation). Weights are random: speed does not depend on what was learned, and greedy
decoding of the same weights must give the same tokens either way.

The last columns bound what a cache can give here. A cached step at batch 1 must read every
weight once per token. "weights floor" is every Linear of the model applied to one (batch, in)
input, nothing else (the model's own route for those products), so a cached step cannot beat it,
and "ceiling" is the uncached time per token divided by it. "memory pass" is one sum over every
weight: how fast this machine can read them at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import peak_rss_mib, print_table  # noqa: E402

from gpt_core import GPT, GPTConfig, Linear, generate  # noqa: E402

MODELS = {
    "6L-6H-384d, block 256": (GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384), 1),
    "sort (2L-4H-64d)": (GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64), 6),
}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_generate(model: GPT, prompt: torch.Tensor, n_new: int, use_cache: bool) -> tuple[torch.Tensor, float]:
    synchronize(prompt.device)
    start = time.perf_counter()
    out = generate(model, prompt, n_new, temperature=0.0, use_cache=use_cache)
    synchronize(prompt.device)
    return out, time.perf_counter() - start


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=255, help="new tokens for the large model")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"torch {torch.__version__}, {where}, greedy decoding, float32\n")
    rows = []
    for name, (config, prompt_len) in MODELS.items():
        torch.manual_seed(0)
        model = GPT(config).to(device).eval()
        n_new = min(args.tokens, config.block_size + 1 - prompt_len)
        for batch in args.batches:
            gen = torch.Generator().manual_seed(1)
            prompt = torch.randint(config.vocab_size, (batch, prompt_len), generator=gen).to(device)
            timed_generate(model, prompt[:, :prompt_len], 2, True)  # warm up
            cached, t_cached = timed_generate(model, prompt, n_new, True)
            uncached, t_uncached = timed_generate(model, prompt, n_new, False)
            tokens = batch * n_new
            floor, memory_pass = weight_read_times(model, batch)
            rows.append([name, batch, n_new, f"{tokens / t_uncached:,.0f}", f"{tokens / t_cached:,.0f}",
                         f"{t_uncached / t_cached:.1f}x", "yes" if torch.equal(cached, uncached) else "NO",
                         f"{t_cached / n_new * 1e3:.2f}", f"{floor * 1e3:.2f}", f"{t_uncached / n_new / floor:.1f}x",
                         f"{memory_pass * 1e3:.2f}", f"{peak_rss_mib():.0f}"])  # fmt: skip
    print_table(HEADER, rows)


HEADER = ["model", "batch", "new tokens", "tokens/s no cache", "tokens/s cache", "speedup", "identical",
          "cached ms/step", "weights floor ms", "ceiling", "memory pass ms", "peak RSS MiB"]  # fmt: skip

if __name__ == "__main__":
    main()
