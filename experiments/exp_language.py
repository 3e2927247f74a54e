"""4. Language: character-level tiny-shakespeare with the small CPU configuration.

GPT_DATA=tinyshakespeare.txt python experiments/exp_language.py   # else the shakespeare task's download
python experiments/exp_language.py --quick
"""

from __future__ import annotations

import time

from common import (
    Context,
    context_from_args,
    copy_picture,
    gpt_train,
    kept_section,
    markdown_table,
    report,
    shakespeare_path,
    train,
)

from gpt_viz import HELDOUT, metric_key

KEPT = "<!-- kept by exp_language.py: measured by exp_nanogpt.py, outside run_all -->"
"""Marks the section at the end of language.md that `exp_nanogpt.py` measures (the nanoGPT comparison, which needs
a clone of nanoGPT and so is not one of run_all's experiments): a regenerated report keeps it."""


def run(ctx: Context):
    start = time.perf_counter()
    kept = kept_section(ctx.out / "language.md", KEPT)
    data = shakespeare_path(ctx)
    quick = ["--steps", "20", "--set", "n_layer=1", "--set", "eval_every=10", "--set", "eval_limit=20"]
    args = ["--task", "shakespeare", "--data", str(data), *(quick if ctx.quick else [])]
    result = train(ctx, "shakespeare", args, pictures=True)
    final = result.final
    train_seconds = next(r["elapsed"] for r in result.metrics if r["step"] == final["step"])
    rows = [
        ["held-out loss (nats/char, every held-out window)", f"{final[metric_key(HELDOUT, 'loss')]:.4f}"],
        ["held-out bits per character", f"{final[metric_key(HELDOUT, 'bits_per_char')]:.4f}"],
        ["steps", final["step"]],
        ["steps per second (training and periodic evaluation)", f"{final['step'] / train_seconds:.1f}"],
        ["wall time of the command", f"{result.wall:.1f} s"],
    ]
    samples = gpt_train(
        ctx,
        "sample",
        result.run_dir,
        "--prompt",
        "ROMEO:",
        "--prompt",
        "JULIET:",
        "--max-new-tokens",
        "300",
        "--temperature",
        "0.8",
        "--top-k",
        "20",
        "--device",
        "cpu",
    ).stdout
    body = markdown_table(["measure", "value"], rows)
    body += "\n\nSamples (temperature 0.8, top-k 20, seed 0):\n\n```\n" + samples.strip() + "\n```\n\n"
    body += copy_picture(ctx, result.layout.curves_picture, "shakespeare_curves.png")
    train_command = "gpt-train run --task shakespeare --data tinyshakespeare.txt"
    sample_command = "gpt-train sample RUN_DIR --prompt ROMEO: --prompt JULIET: --max-new-tokens 300"
    commands = [
        " ".join([train_command, *(quick if ctx.quick else [])]),
        sample_command + " --temperature 0.8 --top-k 20",
    ]
    question = (
        "How well does the default 4-layer, 128-dim character model learn tiny-shakespeare on a CPU, and how does it "
        "compare with nanoGPT's CPU recipe on the same characters?"
    )
    return report(ctx, "language", "4. Language", commands, body, time.perf_counter() - start, question, kept)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
