"""3b. What each grokking lever does: modadd's defaults with one setting changed at a time (one seed, the
default's steps), measured the way exp_grokking.py measures the default run. This is how the defaults were
chosen; it is not part of run_all (about ten runs of up to 15 minutes each).

    python experiments/exp_grokking_levers.py
    python experiments/exp_grokking_levers.py --quick
"""

from __future__ import annotations

import re
import time

from common import Context, context_from_args, markdown_table, report, train_all
from exp_grokking import (
    ACCURACY,
    CHANCE_BOUND,
    GROKFAST,
    MIN_RATIO,
    PROGRESS,
    QUICK,
    QUICK_STEPS,
    SEEDS,
    SHARE,
    WINDOW,
    Grokking,
    ratio_text,
    step_or_never,
)

import gpt_viz
from gpt_viz import HELDOUT, TRAIN

LEVERS = {
    "default": [],
    "init_scale=1 (GPT-2's std 0.02)": ["--set", "init_scale=1"],
    "init_scale=4": ["--set", "init_scale=4"],
    "layernorm=true": ["--set", "layernorm=true"],
    "train_fraction=0.5": ["--set", "train_fraction=0.5"],
    "lr=1e-3 (Nanda et al.)": ["--lr", "1e-3", "--set", "min_lr=1e-4"],  # dropped tenfold, as the default's
    "lr=1e-3 with Grokfast": ["--lr", "1e-3", "--set", "min_lr=1e-4", *GROKFAST],
    "weight_decay=3": ["--weight-decay", "3"],
    "n_embd=128 (Nanda et al.)": ["--set", "n_embd=128"],
}
HEADER = ["change from the defaults", "what it did", "t_fit", "t_gen", "t_gen / t_fit",
          f"max held-out acc up to {WINDOW} x t_fit", f"first held-out acc >= {CHANCE_BOUND}", "final train acc",
          "final held-out acc", f"final {SHARE}", "run's clock"]  # fmt: skip

MEANING = f"""**What it means.** Each row is the default recipe on one seed with one setting changed. t_fit is the
first evaluation with train accuracy >= 0.99 and t_gen the first with held-out accuracy >= 0.99; "grokked" says
that held-out accuracy reached 0.99 at least {MIN_RATIO} x t_fit after staying below {CHANCE_BOUND} up to {WINDOW} x
t_fit, not that it stayed there: the picture shows whether it did, and the final held-out column where it ended."""


def verdict(g: Grokking) -> str:
    """The run in words, read off the same numbers as the table."""
    if g.t_fit is None:
        return "never fit the training set"
    if not g.window_covered:
        return f"the run ended before {WINDOW} x t_fit"
    if not g.stays_at_chance:
        return f"no delay: held-out acc rose above {CHANCE_BOUND} before {WINDOW} x t_fit"
    if g.t_gen is None:
        return "memorised, then never generalised"
    return "grokked" if g.ratio >= MIN_RATIO else f"grokked, but t_gen / t_fit < {MIN_RATIO}"


def slug(lever: str) -> str:
    """A run directory name: the lever's words, letters, digits and dots kept."""
    return "grokking-lever-" + "-".join(re.findall(r"[\w.]+", lever.replace("=", " ")))


def run(ctx: Context):
    start = time.perf_counter()
    quick = [*QUICK, "--steps", str(QUICK_STEPS)] if ctx.quick else []
    levers = dict(list(LEVERS.items())[:2]) if ctx.quick else LEVERS
    seed = ["--seed", str(SEEDS[0])]
    runs = train_all(ctx, {slug(lever): ["--task", "modadd", *seed, *flags, *quick] for lever, flags in levers.items()})
    rows = []
    for lever in levers:
        result = runs[slug(lever)]
        g = Grokking.of(result)
        window = f"{max(g.window):.4f}" if g.window else "-"
        above = result.first_step(ACCURACY[HELDOUT], CHANCE_BOUND)
        rows.append([lever, verdict(g), step_or_never(g.t_fit), step_or_never(g.t_gen), ratio_text(g.ratio), window,
                     step_or_never(above), f"{g.final[ACCURACY[TRAIN]]:.4f}", f"{g.final[ACCURACY[HELDOUT]]:.4f}",
                     f"{g.final[PROGRESS]:.3f}", f"{result.clock:.0f} s"])  # fmt: skip
    figure = gpt_viz.compare_runs([runs[slug(lever)].run_dir for lever in levers], ACCURACY[HELDOUT],
                                  labels=list(levers))  # fmt: skip
    gpt_viz.save_figure(figure, ctx.out / "grokking-levers.png")
    body = markdown_table(HEADER, rows) + "\n\n![grokking-levers](grokking-levers.png)\n\n" + MEANING
    commands = [" ".join(["gpt-train run --task modadd", *seed, *flags, *quick]) for flags in levers.values()]
    return report(ctx, "grokking-levers", "3b. Grokking: the levers, one at a time", commands, body,
                  time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
