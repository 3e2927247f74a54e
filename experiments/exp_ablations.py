"""7. Ablations on sort: baseline vs no LayerNorm vs no residual connections vs neither, at 3 layers and at 6,
3 seeds each.

    python experiments/exp_ablations.py
    python experiments/exp_ablations.py --quick
"""

from __future__ import annotations

import time

from common import Context, context_from_args, markdown_table, mean_std, report, train_all

import gpt_viz
from gpt_tasks import get_task
from gpt_viz import HELDOUT, metric_key

VARIANTS = {
    "baseline": [],
    "no LayerNorm": ["--set", "layernorm=false"],
    "no residual": ["--set", "residual=false"],
    "neither": ["--set", "layernorm=false", "--set", "residual=false"],
}
STEPS = 1000
SORT_STEPS = get_task("sort").defaults().train["steps"]  # the sort task's default, for the report's words
FINAL_EVAL = 20_000


def slug(variant: str) -> str:
    return variant.replace(" ", "-").lower()


QUESTION = "What do LayerNorm and the residual stream do for a sort model, at 3 layers and at 6?"


def meaning(exact: dict, losses: dict) -> str:
    """The table in words, with its numbers (means over the seeds); empty for a quick run."""
    if (3, "neither") not in exact or (6, "neither") not in exact:
        return ""
    mean = lambda values: sum(values) / len(values)
    e = {key: mean(values) for key, values in exact.items()}
    return (
        f"**What it means.** At 3 layers either alone can go (no LayerNorm {e[3, 'no LayerNorm']:.3f}, no residual "
        f"{e[3, 'no residual']:.3f}) but not both ({e[3, 'neither']:.3f}). At 6 layers the residual stream is what "
        f"makes depth trainable: without it held-out exact match is {e[6, 'no residual']:.4f} (training loss "
        f"{mean(losses[6, 'no residual']):.2f}; 2.3026 = ln 10 is a uniform guess over 10 digits), while without "
        f"LayerNorm it still sorts, less reliably ({mean_std(exact[6, 'no LayerNorm'])})."
    )


def run(ctx: Context):
    start = time.perf_counter()
    depths, seeds = ((1, 2), (1,)) if ctx.quick else ((3, 6), (1, 2, 3))
    full = ["--steps", str(STEPS), "--set", f"final_eval_limit={FINAL_EVAL}", "--set", "eval_every=100"]
    common = ["--steps", "20", "--set", "length=4", "--set", "eval_every=10"] if ctx.quick else full
    specs = {
        f"ablation-{depth}L-{slug(v)}-seed{seed}": ["--task", "sort", "--set", f"n_layer={depth}", "--seed", str(seed),
                                                     *flags, *common]
        for depth in depths for v, flags in VARIANTS.items() for seed in seeds
    }  # fmt: skip
    runs = train_all(ctx, specs)
    rows, exact_by, losses_by = [], {}, {}
    body_pictures = []
    for depth in depths:
        for variant in VARIANTS:
            group = [runs[f"ablation-{depth}L-{slug(variant)}-seed{seed}"] for seed in seeds]
            losses = [r.final["loss"] for r in group]
            exact = [r.final[metric_key(HELDOUT, "exact_match")] for r in group]
            rows.append([f"{depth} layers", variant, mean_std(losses), mean_std(exact)])
            exact_by[depth, variant], losses_by[depth, variant] = exact, losses
        first_seed = [runs[f"ablation-{depth}L-{slug(v)}-seed{seeds[0]}"].run_dir for v in VARIANTS]
        figure = gpt_viz.compare_runs(first_seed, "loss", labels=list(VARIANTS))
        gpt_viz.save_figure(figure, ctx.out / f"ablations-{depth}L.png")
        body_pictures.append(f"![ablations {depth} layers](ablations-{depth}L.png)")
    header = ["depth", "variant", "final training loss", "held-out exact match"]
    body = markdown_table(header, rows)
    body += (
        f"\n\nMean ± sample standard deviation over seeds {', '.join(map(str, seeds))}; "
        + (
            ""
            if ctx.quick
            else f"{STEPS:,} steps each (the sort default is {SORT_STEPS:,}; fewer, to fit 24 runs on a CPU), "
        )
        + f"held-out exact match on a fixed sample of {FINAL_EVAL:,} held-out sequences. "
        "The curves overlay the training loss of the first seed of each variant.\n\n"
        + meaning(exact_by, losses_by)
        + "\n\n"
        + "\n\n".join(body_pictures)
    )
    base = "gpt-train run --task sort --set n_layer=DEPTH --seed SEED"
    commands = [" ".join([base, *flags, *common]) for flags in VARIANTS.values()]
    return report(ctx, "ablations", "7. Ablations", commands, body, time.perf_counter() - start, QUESTION)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
