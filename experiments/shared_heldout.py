"""A trained Shakespeare run's loss on the characters that another project's split also holds out.

    python experiments/shared_heldout.py RUN_DIR --data ../shared/data/tinyshakespeare.txt \
        --boundary-fraction 0.9 --windows-out windows.json

nanoGPT's shakespeare_char split trains on the first 90% of the text and validates on the rest
(characters from int(0.9 * len(text)) on); ours holds out chunk_size-character chunks (1,024 by
default) chosen by a blake2b hash of each chunk (salt b"shakespeare"). Characters that neither model
trained on: our held-out chunks' non-overlapping windows (block_size characters of input from the
chunk's start on, each position scored on the next character) that start at or after that boundary.
This prints our model's loss on them, on the rest of our held-out windows and on all of them (until
the text task, be8d053, these were the shakespeare task's own evaluation windows), and writes the
windows' start offsets and the model's vocabulary to `--windows-out` (JSON), so that another model
can be scored on exactly the same characters with exactly the same contexts. The split is recomputed
here from the run's parameters, the text is encoded by the run's own tokenizer, and nothing here
imports or runs the other project.

With `--all-after-boundary` the shared windows are every non-overlapping window from the boundary on:
the whole of the other split's held-out part, for a run trained on the text before the boundary alone
(`--data` a file holding just that part), which has seen none of it.
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
from gpt_tasks.splits import is_heldout
from gpt_train.runs import load_run
from gpt_viz import HELDOUT, RunLayout, metric_key

EVAL_BATCH = 256
SALT = b"shakespeare"  # the shakespeare task's split salt


def heldout_windows(text: str, chunk_size: int, fraction: float, block_size: int) -> torch.Tensor:
    """Start offsets of the non-overlapping evaluation windows of the held-out chunks, in text order."""
    starts = []
    for chunk_start in range(0, len(text), chunk_size):
        chunk = text[chunk_start : chunk_start + chunk_size]
        if len(chunk) < block_size + 1 or not is_heldout(chunk.encode("utf-8"), fraction, SALT):
            continue
        starts += range(chunk_start, chunk_start + (len(chunk) - 1) // block_size * block_size, block_size)
    return torch.tensor(starts, dtype=torch.long)


@torch.inference_mode()
def window_losses(model: GPT, tokens: torch.Tensor, starts: torch.Tensor, block_size: int) -> torch.Tensor:
    """Mean next-character cross-entropy (nats) over the positions of each window at `starts`
    (inputs tokens[s : s + block_size], targets one further on): one value per window."""
    losses = []
    offsets = torch.arange(block_size + 1)
    for chunk in starts.split(EVAL_BATCH):
        seq = tokens[chunk[:, None] + offsets]
        logits = model(seq[:, :-1]).logits.float()
        per_position = F.cross_entropy(logits.flatten(0, 1), seq[:, 1:].flatten(), reduction="none")
        losses.append(per_position.view(len(chunk), block_size).mean(dim=1))
    return torch.cat(losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a finished `gpt-train run --task shakespeare` directory")
    parser.add_argument("--data", required=True, help="the corpus the run was trained on")
    parser.add_argument("--boundary-fraction", type=float, default=0.9,
                        help="the other split holds out characters int(fraction * length) on")  # fmt: skip
    parser.add_argument("--windows-out", type=Path, help="write the shared windows here (JSON)")
    parser.add_argument("--all-after-boundary", action="store_true",
                        help="share every non-overlapping window from the boundary on, not only our held-out ones: "
                        "for a run trained on the text before the boundary alone")  # fmt: skip
    args = parser.parse_args()

    config, model = load_run(args.run_dir, torch.device("cpu"))
    if config.task != "shakespeare":
        parser.error(f"{args.run_dir} is a {config.task} run, not shakespeare")
    # The run's own tokenizer (a recorded alphabet included), on the text given; a recorded corpus hash
    # would refuse a different file (the first 90% a run was trained on, scored on the whole text).
    params = {key: value for key, value in config.task_params.items() if key != "corpus_sha256"} | {"data": args.data}
    task = get_task("shakespeare", **params)
    text = Path(args.data).read_text(encoding="utf-8")
    tokens = torch.tensor(task.encode(text), dtype=torch.long)
    if len(tokens) != len(text):
        parser.error("the run's tokenizer is not one token per character; the windows are character offsets")
    boundary = int(len(text) * args.boundary_fraction)
    block_size = params["block_size"]
    starts = heldout_windows(text, params["chunk_size"], params["heldout_fraction"], block_size)
    shared, before = starts[starts >= boundary], starts[starts < boundary]
    shared_label = "shared: our held-out windows at or after the boundary"
    if args.all_after_boundary:
        shared = torch.arange(boundary, len(text) - block_size, block_size)
        shared_label = "shared: every window at or after the boundary"

    rows, shared_losses = [], None
    for label, subset in ((shared_label, shared),
                          ("our held-out windows before the boundary", before),
                          ("all our held-out windows", starts)):  # fmt: skip
        losses = window_losses(model, tokens, subset, block_size)
        shared_losses = losses if shared_losses is None else shared_losses
        rows.append((label, len(subset), len(subset) * block_size, float(losses.double().mean())))
    digest = hashlib.sha256(text.encode()).hexdigest()
    print(f"text: {len(text):,} characters, sha256 {digest[:16]}...; boundary at character {boundary:,} "
          f"({args.boundary_fraction:g} of the text); windows of {block_size}")  # fmt: skip
    print(f"{'windows':<56} {'count':>7} {'chars':>9} {'nats/char':>10} {'bits/char':>10}")
    for label, n, chars, loss in rows:
        print(f"{label:<56} {n:>7,} {chars:>9,} {loss:>10.4f} {loss / math.log(2):>10.4f}")
    final = RunLayout(args.run_dir).final
    if final.is_file():
        reported = json.loads(final.read_text()).get(metric_key(HELDOUT, "loss"))
        print(f"the run's own held-out loss ({final.name}; the same windows for runs made before the text task): "
              f"{reported:.4f}")  # fmt: skip

    if args.windows_out:
        args.windows_out.write_text(json.dumps({
            "text_sha256": digest,
            "boundary": boundary,
            "block_size": block_size,
            "vocabulary": [task.decode([i]) for i in range(task.vocab_size)],
            "starts": shared.tolist(),
            "our_loss": rows[0][3],
            "our_window_losses": shared_losses.tolist(),
        }))  # fmt: skip
        print(f"wrote {len(shared):,} window starts to {args.windows_out}")


if __name__ == "__main__":
    main()
