"""The measurements behind gpt-core's kernel choices, each an A/B pair timed in one process.

    python benchmarks/kernels.py
    python benchmarks/kernels.py --rounds 5     # quicker, wider ranges

Every row times the option gpt-core uses against the obvious alternative, on the tensor shapes of the
Shakespeare configuration (batch 12, block 64, 4 heads, 128 dims) unless it says otherwise. The two
take turns round by round (which goes first alternates); in a round each side repeats its call until
it has run about 10 ms (once for the slow rows). The times are medians over rounds of a call's mean
time in the round; the speedup is the median of the per-round ratios, with the lowest and highest
round's in brackets.
The decoding rows use the KV-cache benchmark's 6-layer, 384-dim model at batch 1 (random weights:
speed does not depend on them). The last two rows score sort's held-out examples with a random model in
the chunks gpt-core's prompt-answer evaluation uses (`gpt_tasks.prompt_answer.EVAL_BATCH`), against chunks 4
times larger and 4 times smaller.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, interleaved_rounds, peak_rss_mib, positive_int, print_table, ratio_spread  # noqa: E402

B, T, H, C = 12, 64, 4, 128
ROUNDS = 20  # rounds per row by default
ROUND_SECONDS = 0.01  # each side of a round repeats its call until it takes about this long


def calls_per_round(fns: tuple[Callable[[], object], ...]) -> int:
    """Calls of each side per round: enough for the faster side to take ROUND_SECONDS, so that one
    interruption by another process is a small part of a round (a few-microsecond call timed ten
    times gave round ratios from 1.9x to 139x on the shared machine)."""
    fastest = float("inf")
    for fn in fns:
        fn()  # warm up
        start = time.perf_counter()
        fn()
        fastest = min(fastest, time.perf_counter() - start)
    return max(1, math.ceil(ROUND_SECONDS / max(fastest, 1e-7)))


def masked_scores() -> torch.Tensor:
    """Causally masked attention scores after the max subtraction: half of them -inf."""
    scores = torch.randn(B, H, T, T).masked_fill_(torch.ones(T, T, dtype=torch.bool).triu_(1), float("-inf"))
    return scores - scores.amax(dim=-1, keepdim=True)


def exp_rows():
    scores = masked_scores()
    return "softmax numerator on masked scores", "exp2 (log2 e in the scale)", "exp", (scores.exp2, scores.exp)


def mask_rows():
    scores = torch.randn(B, H, T, T)
    blocked = torch.ones(T, T, dtype=torch.bool).triu_(1)
    bias = torch.zeros(T, T).masked_fill_(blocked, float("-inf"))
    return ("causal mask", "add_(cached -inf bias)", "masked_fill_(bool mask)",
            (lambda: scores.add_(bias), lambda: scores.masked_fill_(blocked, float("-inf"))))  # fmt: skip


def sigmoid_rows():
    x = torch.randn(B, T, 4 * C)
    return "GELU's gate", "sigmoid(2u)", "0.5 (1 + tanh(u))", (x.sigmoid, lambda: x.tanh().add_(1.0).mul_(0.5))


def variance_rows():
    x = torch.randn(B * T, C)

    def two_passes():
        centred = x - x.mean(dim=-1, keepdim=True)
        return torch.linalg.vector_norm(centred, dim=-1, keepdim=True)

    return ("LayerNorm statistics", "mean, then vector_norm", "torch.var_mean",
            (two_passes, lambda: torch.var_mean(x, dim=-1, keepdim=True, correction=0)))  # fmt: skip


def embedding_rows():
    weight = torch.randn(65, C, requires_grad=True)
    ids = torch.randint(65, (B, T))
    grad = torch.randn(B, T, C)
    return ("embedding forward + backward", "index_select", "weight[ids]",
            (lambda: weight.index_select(0, ids.reshape(-1)).view(B, T, C).backward(grad),
             lambda: weight[ids].backward(grad)))  # fmt: skip


def adamw_rows():
    from gpt_core import GPT, GPTConfig

    params = list(GPT(GPTConfig(vocab_size=65, block_size=T, n_layer=4, n_head=H, n_embd=C)).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    fused = torch.optim.AdamW(params, lr=1e-4, fused=True)
    looped = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    return "AdamW step (Shakespeare model)", "fused=True", "per-tensor loop", (fused.step, looped.step)


def decode_model():
    from kv_cache import MODELS

    from gpt_core import GPT

    _, config, _ = MODELS["6l"]
    torch.manual_seed(0)
    return GPT(config).eval()


def decode_step(model, mode: Callable[[], object]) -> Callable[[], object]:
    """One KV-cached step of the decode model at position 128, under `mode` (no_grad or inference_mode)."""
    token = torch.zeros(1, 1, dtype=torch.long)
    with mode():
        cache = model.new_cache(1, 256)
        model(torch.zeros(1, 128, dtype=torch.long), cache=cache)

    def step():
        with mode():
            model(token, cache=cache)
        cache.length -= 1

    return step


def inference_mode_rows():
    model = decode_model()
    return ("cached decoding step, batch 1", "inference_mode", "no_grad",
            (decode_step(model, torch.inference_mode), decode_step(model, torch.no_grad)))  # fmt: skip


def function_bypass_rows():
    from gpt_core.kernels.layer_norm import _LayerNorm, layer_norm

    x, weight, bias = torch.randn(1, 1, 384), torch.ones(384), torch.zeros(384)

    @torch.no_grad()
    def through_function():
        return _LayerNorm.apply(x, weight, bias, 1e-5)

    @torch.no_grad()
    def direct():
        return layer_norm(x, weight, bias)

    return "LayerNorm of one token, no grad", "forward alone", "autograd.Function.apply", (direct, through_function)


def evaluation_rows(factor: int):
    """Sort's held-out scoring in the chunks gpt-core's prompt-answer evaluation uses (prompt_answer.EVAL_BATCH,
    read, not restated) against chunks `factor` times larger (factor > 1) or smaller (factor < 1)."""
    import gpt_tasks.prompt_answer as prompt_answer
    from gpt_core import GPT, GPTConfig
    from gpt_tasks import get_task

    task = get_task("sort")
    model = GPT(GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64))
    n = 50_000
    ours = prompt_answer.EVAL_BATCH
    other = max(1, round(ours * factor))

    def evaluate_in_chunks_of(size: int) -> Callable[[], object]:
        def run():
            prompt_answer.EVAL_BATCH, kept = size, prompt_answer.EVAL_BATCH
            try:
                task.evaluate(model, "heldout", "cpu", n)
            finally:
                prompt_answer.EVAL_BATCH = kept

        return run

    return (f"sort held-out scoring, {n:,} sequences", f"chunks of {ours:,}", f"chunks of {other:,}",
            (evaluate_in_chunks_of(ours), evaluate_in_chunks_of(other)), 7)  # fmt: skip


def larger_chunk_rows():
    return evaluation_rows(4)


def smaller_chunk_rows():
    return evaluation_rows(1 / 4)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=positive_int, default=ROUNDS, help=f"rounds per row (default {ROUNDS})")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("us: median over rounds; speedup: median of the per-round ratios (lowest-highest round)\n")
    rows = []
    makers = (exp_rows, mask_rows, sigmoid_rows, variance_rows, embedding_rows, adamw_rows, inference_mode_rows,
              function_bypass_rows, larger_chunk_rows, smaller_chunk_rows)  # fmt: skip
    for make in makers:
        measure, ours, other, fns, *most = make()  # a slow row may cap its rounds
        rounds = min(most[0], args.rounds) if most else args.rounds
        calls = calls_per_round(fns)
        ours_s, other_s = interleaved_rounds(fns, rounds, calls=calls, warmup=min(calls, 3))
        speedup = ratio_spread(other_s, ours_s)
        ours_us, other_us = (statistics.median(t) * 1e6 for t in (ours_s, other_s))
        rows.append([measure, ours, f"{ours_us:,.1f}", other, f"{other_us:,.1f}", speedup.ratio(), rounds, calls])
    print_table(["measure", "gpt-core uses", "us", "instead of", "us", "speedup", "rounds", "calls/round"], rows)
    print(f"\npeak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
