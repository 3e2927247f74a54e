"""1. Sort, the seed's headline: 6 digits, vocab 10, 2 layers / 4 heads / 64 dims, a quarter held out by hash.

python experiments/exp_sort.py            # full: gpt-train run --task sort (the defaults)
python experiments/exp_sort.py --quick
"""

from __future__ import annotations

import time

from common import Context, context_from_args, copy_picture, markdown_table, report, train

from gpt_viz import HELDOUT, metric_key

QUICK = ["--steps", "40", "--set", "length=4", "--set", "n_layer=1", "--set", "eval_every=20"]


def run(ctx: Context):
    start = time.perf_counter()
    args = ["--task", "sort", *(QUICK if ctx.quick else [])]
    result = train(ctx, "sort", args)
    final = result.final
    exact, examples = final[metric_key(HELDOUT, "exact_match")], final[metric_key(HELDOUT, "examples")]
    reached = result.first_step(metric_key(HELDOUT, "exact_match"), 0.9995)
    reached_at = next((r["elapsed"] for r in result.metrics if r["step"] == reached), None)
    rows = [
        ["held-out exact match (whole held-out split, greedy + KV cache)", f"{exact:.5f}"],
        ["held-out sequences scored", f"{examples:,.0f}"],
        ["wrong sequences", f"{round((1 - exact) * examples):,}"],
        ["training steps", final["step"]],
        ["first periodic evaluation >= 99.95% (2,000 sampled held-out)",
         f"step {reached} ({reached_at:.1f} s)" if reached else "not reached"],
        ["training + evaluation time (run's own clock)", f"{final['elapsed']:.1f} s"],
        ["wall time of the command (process start to exit)", f"{result.wall:.1f} s"],
    ]  # fmt: skip
    body = markdown_table(["measure", "value"], rows)
    body += "\n\n" + copy_picture(ctx, result.layout.curves_picture, "sort_curves.png")
    body += "\n\n" + copy_picture(ctx, result.layout.attention_picture, "sort_attention.png")
    return report(ctx, "sort", "1. Sort", ["gpt-train run --task sort" + (" " + " ".join(QUICK) if ctx.quick else "")],
                  body, time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
