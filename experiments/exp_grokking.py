"""3. Grokking: a + b mod 113 on 30% of the pairs, full batch, AdamW; weight decay 1.0 vs 0.

python experiments/exp_grokking.py
python experiments/exp_grokking.py --quick
"""

from __future__ import annotations

import time

from common import Context, context_from_args, markdown_table, report, train_all

import gpt_viz
from gpt_viz import HELDOUT, TRAIN, metric_key

THRESHOLD = 0.99


def run(ctx: Context):
    start = time.perf_counter()
    quick = ["--set", "p=23", "--steps", "40", "--set", "eval_every=10"] if ctx.quick else []
    specs = {
        "grokking-wd1": ["--task", "modadd", *quick],
        "grokking-wd0": ["--task", "modadd", "--weight-decay", "0", *quick],
    }
    runs = train_all(ctx, specs)
    rows = []
    for name, result in runs.items():
        train_step = result.first_step(metric_key(TRAIN, "accuracy"), THRESHOLD)
        heldout_step = result.first_step(metric_key(HELDOUT, "accuracy"), THRESHOLD)
        ratio = f"{heldout_step / train_step:.1f}x" if train_step and heldout_step else "-"
        final = result.final
        train_acc, heldout_acc = final[metric_key(TRAIN, "accuracy")], final[metric_key(HELDOUT, "accuracy")]
        rows.append([
            "1.0" if name.endswith("wd1") else "0", train_step or "never", heldout_step or "never", ratio,
            f"{train_acc:.4f}", f"{heldout_acc:.4f}", final["step"], f"{result.wall:.0f} s",
        ])  # fmt: skip
        gpt_viz.save_figure(gpt_viz.grokking(result.run_dir), ctx.out / f"{name}.png")
    header = ["weight decay", "train acc >= 99% at step", "held-out acc >= 99% at step", "ratio",
              "final train acc", "final held-out acc", "steps", "wall"]  # fmt: skip
    body = markdown_table(header, rows)
    compare = gpt_viz.compare_runs([r.run_dir for r in runs.values()], metric_key(HELDOUT, "accuracy"),
                                   labels=["weight decay 1.0", "weight decay 0"])  # fmt: skip
    gpt_viz.save_figure(compare, ctx.out / "grokking-compare.png")
    body += "\n\n![grokking-wd1](grokking-wd1.png)\n\n![grokking-wd0](grokking-wd0.png)"
    body += "\n\n![grokking-compare](grokking-compare.png)"
    commands = ["gpt-train run --task modadd " + " ".join(args[2:]) for args in specs.values()]
    return report(ctx, "grokking", "3. Grokking", commands, body, time.perf_counter() - start)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
