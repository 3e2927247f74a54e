"""2. Addition: 3-digit and 5-digit operands, sum written reversed (least-significant digit first) vs plain.

python experiments/exp_addition.py
python experiments/exp_addition.py --quick
"""

from __future__ import annotations

import time

from common import Context, context_from_args, markdown_table, report, train_all

from gpt_viz import HELDOUT, metric_key

FOLLOW_UP = ["--set", "n_layer=3", "--steps", "4000"]
"""5-digit reversed with one more layer and twice the steps: how its held-out exact match rises, step by step."""


def settings(quick: bool) -> dict[str, list[str]]:
    if quick:
        small = ["--steps", "20", "--set", "n_layer=1", "--set", "eval_every=10"]
        return {f"addition-2-{order}": ["--task", "addition", "--set", "digits=2", "--set", f"reverse={rev}", *small]
                for order, rev in (("reversed", "true"), ("plain", "false"))}  # fmt: skip
    specs = {
        f"addition-{digits}-{order}": ["--task", "addition", "--set", f"digits={digits}", "--set", f"reverse={rev}"]
        for digits in (3, 5)
        for order, rev in (("reversed", "true"), ("plain", "false"))
    }
    specs["addition-5-reversed-followup"] = [*specs["addition-5-reversed"], *FOLLOW_UP]
    return specs


QUESTION = (
    "Can the default model add two 3-digit numbers, and two 5-digit ones, with the sum written least-significant "
    "digit first (reversed) and in the usual order?"
)


def meaning(runs: dict) -> str:
    """What the table says, with its numbers; empty for runs other than the full set (--quick)."""
    if "addition-5-reversed-followup" not in runs:
        return ""
    exact = {name: run.final[metric_key(HELDOUT, "exact_match")] for name, run in runs.items()}
    digits = {name: run.final[metric_key(HELDOUT, "digit_accuracy")] for name, run in runs.items()}
    followup = runs["addition-5-reversed-followup"]
    passes = [
        (threshold, followup.first_step(metric_key(HELDOUT, "exact_match"), threshold)) for threshold in (0.5, 0.999)
    ]
    reached = [f"{threshold} at step {step}" for threshold, step in passes if step is not None]
    course = (
        f"held-out exact match first passes {' and '.join(reached)}"
        if reached
        else "held-out exact match never reaches 0.5 (a periodic evaluation of 2,000 sampled held-out sums)"
    )
    five = "addition-5-reversed", "addition-5-plain"
    sentences = [
        f"**What it means.** Three-digit addition reaches {exact['addition-3-reversed']:.5f} reversed and",
        f"{exact['addition-3-plain']:.5f} plain with the 2-layer default. At five digits the same defaults end",
        f"2,000 steps at {exact[five[0]]:.3f} reversed (digit accuracy {digits[five[0]]:.3f}) and",
        f"{exact[five[1]]:.3f} plain ({digits[five[1]]:.3f}). With 3 layers and 4,000 steps (reversed), {course},",
        f"ending at {exact[followup.name]:.4f} (digit accuracy {digits[followup.name]:.3f}). Each row is one seed:",
        "how far a five-digit run gets in its steps is not settled by one seed.",
    ]
    return " ".join(sentences)


def run(ctx: Context):
    start = time.perf_counter()
    specs = settings(ctx.quick)
    runs = train_all(ctx, specs)
    rows = []
    for name, result in runs.items():
        digits, order = name.split("-")[1:3]
        final = result.final
        exact, examples = final[metric_key(HELDOUT, "exact_match")], final[metric_key(HELDOUT, "examples")]
        model = "3 layers, 4,000 steps" if name.endswith("followup") else "task defaults"
        rows.append([f"{digits} + {digits} digits", order, model, f"{exact:.5f}",
                     f"{examples:,.0f}", final["step"], f"{result.wall:.0f} s"])  # fmt: skip
    header = ["operands", "sum order", "model", "held-out exact match", "held-out sums scored", "steps", "wall"]
    body = markdown_table(header, rows)
    body += (
        "\n\nThe 3-digit held-out split (10% of the 10^6 operand pairs, by hash) is scored in full. The 5-digit "
        "space has 10^10 pairs, so its held-out split cannot be listed: a fixed sample of 20,000 held-out pairs "
        "(drawn by hash rejection, never seen in training) is scored instead."
    )
    body += "\n\n" + meaning(runs)
    commands = ["gpt-train run --task addition " + " ".join(a for a in args[2:]) for args in specs.values()]
    return report(ctx, "addition", "2. Addition", commands, body, time.perf_counter() - start, QUESTION)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
