"""5. KV cache: benchmarks/kv_cache.py at batch 1, three runs on one thread and one on two, its three sides (no
cache, the cached forward, the static step) checked to give identical tokens.

python experiments/exp_kv_cache.py
python experiments/exp_kv_cache.py --quick
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import torch
from common import ROOT, Context, context_from_args, kept_section, markdown_table, report, span

KEPT = (
    "<!-- kept by exp_kv_cache.py: the static step and CUDA-graph replay, measured on a GPU outside the experiment -->"
)
"""Marks the section at the end of kv_cache.md on the static step and its CUDA-graph replay, whose tables come from
a GPU (benchmarks/gpu_check.sh): a regenerated report keeps it."""
ONE_THREAD_RUNS = 3
LARGE, SORT = "6L-6H-384d, block 256", "sort (2L-4H-64d)"
ONE_DECIMAL = "{:.1f}"  # speedups and ratios, as the benchmark prints them
QUESTION = (
    "How much faster greedy decoding is with the KV cache than recomputing the whole prefix at every step, and "
    "what bounds it: a 6-layer, 384-dim model and the sort model, at batch 1."
)


def benchmark(args: list[str], threads: int) -> tuple[str, float]:
    """The benchmark's printed table, run with `threads`, and the run's wall seconds; refused when the three sides'
    tokens differ."""
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(ROOT / "benchmarks" / "kv_cache.py"), *args]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    table = done.stdout
    if "| NO " in table:
        raise RuntimeError("the no-cache, cached and static generations differ:\n" + table)
    return table, wall


def rows_by_model(table: str) -> dict[str, dict[str, str]]:
    """Each model's row of a printed table, as {column: cell}."""
    lines = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()]
    lines = [cells for cells in lines if len(cells) > 1 and not set(cells[0]) <= {"-"}]
    header, body = lines[0], lines[1:]
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in body}


def median_x(cell: str) -> float:
    """5.3 from '5.3x (5.1-5.3)'."""
    return float(cell.split("x")[0])


def about(seconds: float) -> str:
    """A run's duration in words: 'about 40 s', 'about a minute', 'about 3 minutes'."""
    if seconds < 45:
        return f"about {seconds:.0f} s"
    return "about a minute" if seconds < 90 else f"about {seconds / 60:.0f} minutes"


def static_sentence(cached: list[float], static: list[float]) -> str:
    """The static step's speedups against the cached forward's, over the one-thread runs, in words: as fast when
    their ranges overlap."""
    form = span(static, ONE_DECIMAL)
    if min(static) > max(cached):
        return (
            f"The static step, eager here, is faster than the cached forward ({form}x): on a CPU the fixed shapes "
            "save more than the arithmetic it adds by attending over the whole block at every step."
        )
    if max(static) < min(cached):
        return (
            f"The static step, eager here, is slower than the cached forward ({form}x): it attends over the whole "
            "block at every step, and on a CPU that arithmetic costs more than the fixed shapes save."
        )
    return (
        f"The static step, eager here, is as fast as the cached forward ({form}x): it attends over the whole block "
        "at every step, and on a CPU the arithmetic it adds is about what the fixed shapes save."
    )


def meaning(one: list[dict[str, dict[str, str]]], two: dict[str, dict[str, str]]) -> str:
    """What the runs show, in words, from their medians."""
    large = [run[LARGE] for run in one]
    floors = [float(row["weights floor ms"]) for row in large]
    cached = [float(row["cached ms/step"]) for row in large]
    speedup_values = [median_x(row["speedup"]) for row in large]
    speedups = span(speedup_values, ONE_DECIMAL)
    ceilings = span([median_x(row["ceiling"]) for row in large], ONE_DECIMAL)
    sort = span([median_x(run[SORT]["speedup"]) for run in one], ONE_DECIMAL)
    sort_tokens = one[0][SORT]["new tokens"]
    rest = span([c - f for c, f in zip(cached, floors, strict=True)], "{:.2f}")
    times_floor = span([c / f for c, f in zip(cached, floors, strict=True)], ONE_DECIMAL)
    two_speedup, two_ceiling = (two[LARGE][column].split()[0] for column in ("speedup", "ceiling"))
    static = static_sentence(speedup_values, [median_x(row["static speedup"]) for row in large])
    return (
        f"**What it means.** The tokens are identical with and without the cache. At batch 1 the cache makes the "
        f"6-layer model's decoding {speedups}x faster with one thread and {two_speedup} with two. A cached "
        f"step takes {times_floor}x the weights floor: one token's Linear products take {span(floors, '{:.2f}')} "
        "ms with one thread, the rest of the step (attention over the cache, LayerNorm, GELU, the residual adds, the "
        f"hook points and the Python between them, each a small eager operator) another {rest} ms. The ceiling "
        f"column is {ceilings}x with one thread and {two_ceiling} with two. The sort model's {sort_tokens} "
        f"new tokens leave the cache little to save ({sort}x): its weights sit in cache and a step is "
        f"per-operator overhead either way. {static}"
    )


def run(ctx: Context):
    start = time.perf_counter()
    kept = kept_section(ctx.out / "kv_cache.md", KEPT)
    args = ["--quick"] if ctx.quick else ["--batches", "1"]
    runs = 1 if ctx.quick else ONE_THREAD_RUNS  # quick mode checks the machinery, in one run of each
    tables, walls = zip(*(benchmark(args, threads=1) for _ in range(runs)), strict=True)
    two_threads, two_wall = benchmark(args, threads=2)
    one = [rows_by_model(table) for table in tables]
    columns = ("speedup", "static speedup", "cached ms/step", "weights floor ms", "ceiling")
    summary = markdown_table(
        ["run", f"{LARGE.split(',')[0]} speedup", "static speedup", *columns[2:], "sort speedup"],
        [[i + 1, *(rows[LARGE][column] for column in columns), rows[SORT]["speedup"]] for i, rows in enumerate(one)],
    )
    two_rows = "\n".join(line for line in two_threads.splitlines() if line.startswith("|"))
    first = one[0]
    body = (
        f"Batch 1, {first[LARGE]['rounds']} rounds per configuration, the three sides taking turns (the order "
        "rotating from round to round; the sort model repeats its millisecond generations for about half a second a "
        f"side per round); the large model generates {first[LARGE]['new tokens']} new tokens, the sort model "
        f'{first[SORT]["new tokens"]}. "static" is the fixed-shape decoding step of the next section, run eagerly '
        "on the CPU. Each speedup is the median of the per-round ratios to no cache, the lowest and highest round's "
        f"in brackets. {runs} separate run{'s' if runs > 1 else ''} with one thread:\n\n{summary}\n\n"
        "The first run's whole table (torch's version, named above, left out):\n\n"
        f"```\n{tables[0].strip().removeprefix(f'torch {torch.__version__}, ')}\n```\n\n"
        f"With two threads:\n\n```\n{two_rows}\n```\n\n"
        "At batch 1 a cached step must read every weight once per token (42 MB for the 6-layer model). 'memory pass' "
        "is one plain sum over those weights: how fast this machine reads them at all. 'weights floor' is the model's "
        "own Linear layers applied to one row each (one token's projections and nothing else); the uncached time per "
        "token divided by it bounds what any cache can give here ('ceiling'). The rest of a cached step is eager "
        "PyTorch's per-operator overhead, which generation keeps small by running in inference mode and by skipping "
        "the autograd Functions when no gradient is recorded.\n\n" + meaning(one, rows_by_model(two_threads))
    )
    commands = [
        f"OMP_NUM_THREADS=1 python benchmarks/kv_cache.py {' '.join(args)}" + (f"   # {runs} runs" if runs > 1 else ""),
        f"OMP_NUM_THREADS=2 python benchmarks/kv_cache.py {' '.join(args)}",
    ]
    took = f"each run of the benchmark takes {about(statistics.median([*walls, two_wall]))}"
    wall = time.perf_counter() - start
    return report(ctx, "kv_cache", "5. KV cache", commands, body, wall, QUESTION, kept, took=took)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
