"""1. Sort, the seed's headline: 6 digits, vocab 10, 2 layers / 4 heads / 64 dims, a quarter held out by hash; and
the same run on the reference kernels, each piece its plain-autograd definition.

python experiments/exp_sort.py            # full: gpt-train run --task sort (the defaults)
python experiments/exp_sort.py --quick
"""

from __future__ import annotations

import time

from common import Context, context_from_args, copy_picture, markdown_table, report, train

from gpt_viz import HELDOUT, metric_key

QUICK = ["--steps", "40", "--set", "length=4", "--set", "n_layer=1", "--set", "eval_every=20"]


QUESTION = (
    "Can the default model learn to sort 6 digits, judged on every held-out sequence, in about a minute on a CPU?"
)


def wrong(final: dict) -> int:
    exact, examples = final[metric_key(HELDOUT, "exact_match")], final[metric_key(HELDOUT, "examples")]
    return round((1 - exact) * examples)


def reference_section(ctx: Context, fast: dict) -> str:
    """The same command on the reference kernels: does the model a learner writes first train as well?"""
    quick = QUICK if ctx.quick else []
    final = train(ctx, "sort-reference", ["--task", "sort", "--kernels", "reference", *quick]).final
    exact, examples = final[metric_key(HELDOUT, "exact_match")], final[metric_key(HELDOUT, "examples")]
    rows = [[kernels, f"{f[metric_key(HELDOUT, 'exact_match')]:.6f}", f"{wrong(f):,}", f"{f['elapsed']:.1f} s"]
            for kernels, f in (("fast (the default)", fast), ("reference", final))]  # fmt: skip
    command = " ".join(["gpt-train run --task sort --kernels reference", *quick])
    return (
        "## The same run on the reference kernels\n\nDoes the model train as well on the reference kernels, each "
        f"piece its plain-autograd definition (`gpt_core/reference.py`)?\n\n```\n{command}\n```\n\n"
        + markdown_table(["kernels", "held-out exact match", f"wrong of {examples:,.0f}", "run's clock"], rows)
        + f"\n\n**What it means.** The definitions a learner writes first train the seed task to {exact:.5f} "
        f"({wrong(final)} wrong) where the fast kernels reach {fast[metric_key(HELDOUT, 'exact_match')]:.5f} "
        f"({wrong(fast)} wrong), same seed: the fast kernels change the time of a step "
        "([speed.md](speed.md#against-pytorchs-own-layers)), not what the model can learn."
    )


def run(ctx: Context):
    start = time.perf_counter()
    args = ["--task", "sort", *(QUICK if ctx.quick else [])]
    result = train(ctx, "sort", args, pictures=True)
    final = result.final
    exact, examples = final[metric_key(HELDOUT, "exact_match")], final[metric_key(HELDOUT, "examples")]
    reached = result.first_step(metric_key(HELDOUT, "exact_match"), 0.9995)
    reached_at = next((r["elapsed"] for r in result.metrics if r["step"] == reached), None)
    rows = [
        ["held-out exact match (whole held-out split, greedy)", f"{exact:.5f}"],
        ["held-out sequences scored", f"{examples:,.0f}"],
        ["wrong sequences", f"{wrong(final):,}"],
        ["training steps", final["step"]],
        ["first periodic evaluation >= 99.95% (2,000 sampled held-out)",
         f"step {reached} ({reached_at:.1f} s)" if reached else "not reached"],
        ["training + evaluation time (run's own clock)", f"{final['elapsed']:.1f} s"],
        ["wall time of the command (process start to exit)", f"{result.wall:.1f} s"],
    ]  # fmt: skip
    body = markdown_table(["measure", "value"], rows)
    body += (
        f"\n\n**What it means.** {wrong(final)} wrong of {examples:,.0f} held-out sequences, every one scored by "
        "greedy decoding (computed as one teacher-forced pass per batch, equal to it sequence by sequence), after "
        f"{final['elapsed']:.0f} s of training and evaluation. Inside the default model: [inspect.md](inspect.md), "
        "which names the version it was measured with."
    )
    body += "\n\n" + copy_picture(ctx, result.layout.curves_picture, "sort_curves.png")
    body += "\n\n" + copy_picture(ctx, result.layout.attention_picture, "sort_attention.png")
    body += "\n\n" + reference_section(ctx, final)
    command = "gpt-train run --task sort" + (" " + " ".join(QUICK) if ctx.quick else "")
    return report(ctx, "sort", "1. Sort", [command], body, time.perf_counter() - start, QUESTION)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
