"""5. KV cache: the speedup table of benchmarks/kv_cache.py, with the identical-output check.

python experiments/exp_kv_cache.py
python experiments/exp_kv_cache.py --quick
"""

from __future__ import annotations

import subprocess
import sys
import time

from common import ROOT, Context, context_from_args, report


def run(ctx: Context):
    start = time.perf_counter()
    args = ["--batches", "1", "--tokens", "8"] if ctx.quick else ["--batches", "1", "64"]
    command = [sys.executable, str(ROOT / "benchmarks" / "kv_cache.py"), *args]
    table = subprocess.run(command, capture_output=True, text=True, check=True, env=ctx.env()).stdout
    if "| NO " in table:
        raise RuntimeError("cached and uncached generation differ:\n" + table)
    body = table + (
        "\nAt batch 1 a cached step is bound by memory bandwidth: it reads every weight once per token "
        "(42 MB for the 6-layer model, more than this CPU's 32 MB L3), while the uncached step re-reads the "
        "prefix but does it as efficient matrix-matrix work."
    )
    return report(ctx, "kv_cache", "5. KV cache", ["python benchmarks/kv_cache.py " + " ".join(args)], body,
                  time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
