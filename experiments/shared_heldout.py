"""A trained Shakespeare run's loss on the characters that another project's split also holds out.

    python experiments/shared_heldout.py RUN_DIR --data ../shared/data/tinyshakespeare.txt \
        --boundary-fraction 0.9 --windows-out windows.json

nanoGPT's shakespeare_char split trains on the first 90% of the text and validates on the rest
(characters from int(0.9 * len(text)) on); ours holds out 1,024-character chunks chosen by a hash.
Characters that neither model trained on: the windows of our held-out evaluation (non-overlapping,
block_size characters of input, each scored on the next character) that start at or after that
boundary. This prints our model's loss on them, on the rest of our held-out windows and on all of
them (the figure the run reports), and writes the windows' start offsets, the alphabet and the
block size to `--windows-out` (JSON), so that another model can be scored on exactly the same
characters with exactly the same contexts. Nothing here imports or runs the other project.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from gpt_core import GPT
from gpt_tasks import get_task
from gpt_train.runs import load_run

EVAL_BATCH = 256


@torch.inference_mode()
def loss_on_windows(model: GPT, tokens: torch.Tensor, starts: torch.Tensor, block_size: int) -> tuple[float, int]:
    """Mean next-character cross-entropy (nats) over every position of the windows at `starts`
    (inputs tokens[s : s + block_size], targets one further on), and the number of characters scored."""
    total, count = 0.0, 0
    offsets = torch.arange(block_size + 1)
    for chunk in starts.split(EVAL_BATCH):
        seq = tokens[chunk[:, None] + offsets]
        logits = model(seq[:, :-1]).logits.float()
        total += float(F.cross_entropy(logits.flatten(0, 1), seq[:, 1:].flatten(), reduction="sum"))
        count += seq[:, 1:].numel()
    return total / count, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a finished `gpt-train run --task shakespeare` directory")
    parser.add_argument("--data", required=True, help="the corpus the run was trained on")
    parser.add_argument("--boundary-fraction", type=float, default=0.9,
                        help="the other split holds out characters int(fraction * length) on")  # fmt: skip
    parser.add_argument("--windows-out", type=Path, help="write the shared windows here (JSON)")
    args = parser.parse_args()

    config, model = load_run(args.run_dir, torch.device("cpu"))
    if config.task != "shakespeare":
        parser.error(f"{args.run_dir} is a {config.task} run, not shakespeare")
    task = get_task("shakespeare", **{**config.task_params, "data": args.data})
    text = Path(args.data).read_text(encoding="utf-8")
    boundary = int(len(text) * args.boundary_fraction)
    block_size = task.block_size
    starts = task.evaluation_starts("heldout", None)
    shared, before = starts[starts >= boundary], starts[starts < boundary]

    rows = []
    for label, subset in (("shared: our held-out windows at or after the boundary", shared),
                          ("our held-out windows before the boundary", before),
                          ("all our held-out windows (the run's own held-out loss)", starts)):  # fmt: skip
        loss, chars = loss_on_windows(model, task.tokens, subset, block_size)
        rows.append((label, len(subset), chars, loss))
    digest = hashlib.sha256(text.encode()).hexdigest()
    print(f"text: {len(text):,} characters, sha256 {digest[:16]}...; boundary at character {boundary:,} "
          f"({args.boundary_fraction:g} of the text); windows of {block_size}")  # fmt: skip
    print(f"{'windows':<56} {'count':>7} {'chars':>9} {'nats/char':>10} {'bits/char':>10}")
    for label, n, chars, loss in rows:
        print(f"{label:<56} {n:>7,} {chars:>9,} {loss:>10.4f} {loss / math.log(2):>10.4f}")

    if args.windows_out:
        args.windows_out.write_text(json.dumps({
            "text_sha256": digest,
            "boundary": boundary,
            "block_size": block_size,
            "alphabet": task.vocab.alphabet,
            "starts": shared.tolist(),
            "our_loss": rows[0][3],
        }))  # fmt: skip
        print(f"wrote {len(shared):,} window starts to {args.windows_out}")


if __name__ == "__main__":
    main()
