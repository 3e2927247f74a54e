"""6. Positional encodings and length generalisation: train sort on length 6 with learned positions, RoPE
and none; score held-out exact match at lengths 6, 7 and 8, over 3 seeds.

    python experiments/exp_positional.py
    python experiments/exp_positional.py --quick
"""

from __future__ import annotations

import statistics
import time

from common import Context, context_from_args, evaluate, markdown_table, mean_std, report, train_all

import gpt_viz
from gpt_viz import HELDOUT, metric_key

ENCODINGS = ("learned", "rope", "none")


def run(ctx: Context):
    start = time.perf_counter()
    train_length, seeds = (4, (1, 2)) if ctx.quick else (6, (1, 2, 3))
    lengths = (train_length, train_length + 1, train_length + 2)
    quick = ["--steps", "30", "--set", "n_layer=1", "--set", "eval_every=10"] if ctx.quick else []
    specs = {
        f"pos-{enc}-seed{seed}": ["--task", "sort", "--set", f"length={train_length}", "--set", f"pos={enc}",
                                  "--seed", str(seed), *quick]
        for enc in ENCODINGS for seed in seeds
    }  # fmt: skip
    runs = train_all(ctx, specs)
    scores: dict[str, dict[int, list[float] | None]] = {enc: {} for enc in ENCODINGS}
    for enc in ENCODINGS:
        for length in lengths:
            if enc == "learned" and length > train_length:
                scores[enc][length] = None  # no position vectors past the trained table
                continue
            values = []
            for seed in seeds:
                result = runs[f"pos-{enc}-seed{seed}"]
                if length == train_length:
                    values.append(result.final[metric_key(HELDOUT, "exact_match")])
                else:
                    values.append(evaluate(ctx, result.run_dir, "--set", f"length={length}")["exact_match"])
            scores[enc][length] = values
    rows = []
    for enc in ENCODINGS:
        cells = [
            mean_std(v) if v is not None else "n/a (no position vectors past the table)" for v in scores[enc].values()
        ]
        per_seed = "; ".join(
            " / ".join(f"{x:.4f}" for x in v) if v is not None else "n/a" for v in scores[enc].values()
        )
        rows.append([enc, *cells, per_seed])
    header = ["positions", *(f"length {n}" + (" (trained)" if n == train_length else "") for n in lengths),
              "per seed (" + ", ".join(f"length {n}" for n in lengths) + ")"]  # fmt: skip
    body = markdown_table(header, rows)
    body += (
        f"\n\nMean ± sample standard deviation over seeds {', '.join(map(str, seeds))}. "
        "The trained length is scored on its whole held-out split; longer lengths on a fixed sample of "
        "20,000 held-out sequences (their spaces are too large to list). Learned positions have a table "
        "of exactly the trained block, so they cannot be evaluated past it."
    )
    figure = gpt_viz.length_generalisation(
        {enc: {n: (statistics.mean(v), statistics.pstdev(v)) if v else None for n, v in by_len.items()}
         for enc, by_len in scores.items()},
        title=f"sort trained on length {train_length}: held-out exact match by length",
        ylabel="held-out exact match",
    )  # fmt: skip
    gpt_viz.save_figure(figure, ctx.out / "positional.png")
    body += "\n\n![positional](positional.png)"
    commands = [f"gpt-train run --task sort --set pos={enc} --seed SEED" for enc in ENCODINGS]
    commands.append("gpt-train eval RUN_DIR --set length=7   # and length=8")
    return report(ctx, "positional", "6. Positional encodings and length generalisation", commands, body,
                  time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
