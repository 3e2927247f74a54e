"""5. KV cache: the speedup table of benchmarks/kv_cache.py, with the identical-output check.

python experiments/exp_kv_cache.py
python experiments/exp_kv_cache.py --quick
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, Context, context_from_args, report

import gpt_viz


def draw(table: str, path: Path) -> None:
    """tokens/s with and without the cache by batch size, for each model, from the benchmark's printed table."""
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| ")
    ]
    header, body = rows[0], rows[1:]
    col = {name: header.index(name) for name in ("model", "batch", "tokens/s no cache", "tokens/s cache")}
    for model in dict.fromkeys(row[col["model"]] for row in body):
        mine = [row for row in body if row[col["model"]] == model]
        results = {
            label: {int(row[col["batch"]]): (float(row[col[key]].replace(",", "")), 0.0) for row in mine}
            for label, key in (("no cache", "tokens/s no cache"), ("KV cache", "tokens/s cache"))
        }
        figure = gpt_viz.length_generalisation(results, title=f"greedy generation, {model}", ylabel="tokens / s",
                                               xlabel="batch size", legend_title="")  # fmt: skip
        gpt_viz.save_figure(figure, path.with_name(f"{path.stem}-{model.split(',')[0].split(' ')[0]}.png"))


def run(ctx: Context):
    start = time.perf_counter()
    args = ["--quick"] if ctx.quick else ["--batches", "1", "64"]
    command = [sys.executable, str(ROOT / "benchmarks" / "kv_cache.py"), *args]
    table = subprocess.run(command, capture_output=True, text=True, check=True, env=ctx.env()).stdout
    if "| NO " in table:
        raise RuntimeError("cached and uncached generation differ:\n" + table)
    draw(table, ctx.out / "kv_cache.png")
    body = table + (
        "\nAt batch 1 a cached step must read every weight once per token (42 MB for the 6-layer model). "
        "'memory pass' is one plain sum over those weights: how fast this machine reads them at all. 'weights floor' "
        "is the model's own Linear layers applied to one row each (one token's projections and nothing else); the "
        "uncached time per token divided by it bounds what any cache can give here ('ceiling'). The rest of a "
        "cached step is eager PyTorch's per-operator overhead, which generation keeps small by running in inference "
        "mode and by skipping the autograd Functions when no gradient is recorded."
    )
    body += "\n\n" + "\n\n".join(f"![{p.stem}]({p.name})" for p in sorted(ctx.out.glob("kv_cache-*.png")))
    return report(ctx, "kv_cache", "5. KV cache", ["python benchmarks/kv_cache.py " + " ".join(args)], body,
                  time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
