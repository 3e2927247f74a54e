"""Wall time of `gpt-train run --task sort` (defaults, CPU) from start to its final whole-held-out score.

    python benchmarks/sort_time_to_accuracy.py
    python benchmarks/sort_time_to_accuracy.py -- --set pos=rope   # gpt-train run's own arguments after --

Runs the real command in a subprocess and reports: total wall time (process start to exit,
data split, training, the final evaluation of all 250,050 held-out sequences and the pictures
included); the training steps it took; the final held-out exact match; the first periodic evaluation
(2,000 held-out sequences) at or above 99.95%; and the speed of the held-out evaluation in sequences
per second, timed again in this process on the trained model. That evaluation is teacher-forced: one
forward pass per chunk of sequences, the true answer digits in the input, each answer position's
argmax compared with its digit (`gpt_tasks.prompt_answer`), no token generated.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, peak_rss_mib, print_table  # noqa: E402

from gpt_tasks import get_task  # noqa: E402
from gpt_train.loading import load_run  # noqa: E402
from gpt_viz import HELDOUT, RunLayout, metric_key  # noqa: E402

EXACT = metric_key(HELDOUT, "exact_match")

TARGET = 0.9995


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="keep the run here (default: a temporary directory)")
    parser.add_argument("extra", nargs="*", metavar="-- GPT_TRAIN_RUN_ARGS",
                        help="gpt-train run's own arguments, after --: e.g. -- --set pos=rope")  # fmt: skip
    args, unknown = parser.parse_known_args()
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (gpt-train run's own arguments go after --, as "
                     "in: -- --set pos=rope)")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.out or Path(tmp) / "sort"
        command = ["gpt-train", "run", "--task", "sort", "--device", "cpu", "--quiet", "--out", str(run_dir)]
        start = time.perf_counter()
        subprocess.run(command + args.extra, check=True)
        wall = time.perf_counter() - start
        child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        layout = RunLayout(run_dir)
        final = json.loads(layout.final.read_text())
        records = [json.loads(line) for line in layout.metrics.read_text().splitlines()]
        reached = next((r for r in records if r.get(EXACT, 0) >= TARGET and r is not records[-1]), None)

        model = load_run(run_dir).model
        task = get_task("sort")
        t0 = time.perf_counter()
        metrics = task.evaluate(model, "heldout", "cpu")
        eval_seconds = time.perf_counter() - t0

    n_heldout = metrics["examples"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    rows = [
        ["total wall time (process start to exit)", f"{wall:.1f} s"],
        ["training steps", f"{final['step']:,}"],
        ["final held-out exact match (whole split)", f"{final[EXACT]:.5f} of {n_heldout:,.0f}"],
        ["first periodic eval >= 99.95% (2,000 sampled)",
         f"step {reached['step']} at {reached['elapsed']:.1f} s" if reached else "not reached"],
        ["held-out evaluation, teacher-forced argmax", f"{n_heldout / eval_seconds:,.0f} seq/s ({eval_seconds:.1f} s)"],
        ["peak RSS of the run / of this process", f"{child_rss:.0f} MiB / {peak_rss_mib():.0f} MiB"],
    ]  # fmt: skip
    print_table(["measure", "value"], rows)


if __name__ == "__main__":
    main()
