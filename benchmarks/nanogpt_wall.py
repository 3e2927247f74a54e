"""nanoGPT's CPU recipe for tiny-shakespeare against `gpt-train run --task shakespeare`, the same model and
hyperparameters, each run whole as a user runs it, in fresh processes taking turns.

    python benchmarks/nanogpt_wall.py --nanogpt ../nanoGPT --data tinyshakespeare.txt --rounds 3

NANOGPT is a clone of karpathy/nanoGPT with its character data prepared
(`python data/shakespeare_char/prepare.py`, which reads data/shakespeare_char/input.txt when it is there).
Its command is the one its README gives for a CPU (4 layers, 4 heads, 128 dims, block 64, batch 12, 2,000 steps,
no dropout, no compile); ours is the shakespeare task's defaults, which are that recipe. Both run on the CPU
(`--device=cpu` there, `--device cpu` here), with this interpreter and this machine's threads. The two take turns
in every round (in alternating order), each round gives its own ours / nanoGPT ratio, and the table prints the
median wall time of each and the median ratio with its spread. Ours includes what its run does at the end (the
score of every held-out window, the pictures); nanoGPT's includes its periodic estimates on 20 batches and its
checkpoint.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, positive_int, print_table, progress, ratio_spread  # noqa: E402

NANOGPT_RECIPE = [
    "train.py", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
    "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128",
    "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
"""nanoGPT README's command for a CPU, after `python`."""


def timed(command: list[str], cwd: Path) -> float:
    """Wall seconds of one command, its output discarded; a failure stops the running script (this benchmark,
    or an experiment that imports it) with the end of the command's stderr."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"{Path(sys.argv[0]).stem}: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT, data prepared")
    parser.add_argument("--data", type=Path, required=True, help="tinyshakespeare.txt")
    parser.add_argument("--rounds", type=positive_int, default=3)
    args = parser.parse_args()
    nanogpt, data = args.nanogpt.resolve(), args.data.resolve()
    if not (nanogpt / "data" / "shakespeare_char" / "train.bin").is_file():
        sys.exit(f"nanogpt_wall: {nanogpt} has no data/shakespeare_char/train.bin; run its prepare.py first")
    if not data.is_file():
        parser.error(f"--data: no file {data} (give tinyshakespeare.txt)")
    walls: dict[str, list[float]] = {"ours": [], "nanoGPT": []}
    with tempfile.TemporaryDirectory(prefix="nanogpt-wall-") as scratch:
        for r in range(args.rounds):
            out = Path(scratch) / f"round-{r}"
            commands = {
                "ours": ([sys.executable, "-m", "gpt_train", "run", "--task", "shakespeare", "--data", str(data),
                          "--device", "cpu", "--quiet", "--out", str(out / "ours")], Path.cwd()),
                "nanoGPT": ([sys.executable, *NANOGPT_RECIPE, f"--out_dir={out / 'nanogpt'}"], nanogpt),
            }  # fmt: skip
            for side in ("nanoGPT", "ours") if r % 2 == 0 else ("ours", "nanoGPT"):
                walls[side].append(timed(*commands[side]))
                progress(f"  round {r + 1} {side}: {walls[side][-1]:.1f} s")
    ratio = ratio_spread(walls["ours"], walls["nanoGPT"])
    print(f"python {sys.version.split()[0]}, {args.rounds} rounds; walls: medians; ratio: the rounds' median (range)")
    median = lambda side: f"{statistics.median(walls[side]):.1f} s"
    print_table(["nanoGPT wall", "ours wall", "ours / nanoGPT"], [[median("nanoGPT"), median("ours"), ratio.ratio(2)]])


if __name__ == "__main__":
    main()
