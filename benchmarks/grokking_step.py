"""A step of the default grokking run, its evaluations included, against the bare step of its built-in twin.

    python benchmarks/grokking_step.py
    python benchmarks/grokking_step.py --rounds 7 --steps 40

"run step": the trainer of the default `gpt-train run --task modadd`, timed over `--steps` of its steps and
the evaluations the run makes among them (both whole splits every 20 steps, with the probes), divided by
the steps: what a learner waits per step. "twin step": the same model with PyTorch's own kernels
(`twin.builtin_twin`: LayerNorm, GELU, scaled_dot_product_attention, cross_entropy), computing every
position as a plain GPT does, one forward, backward and AdamW step on the full batch, no evaluation. The
two take turns in every round (`common.interleaved_rounds`); the table prints the median of each and the
median ratio with its spread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import ArgumentParser, add_heap_option, interleaved_rounds, positive_int, use_heap  # noqa: E402
from twin import builtin_twin  # noqa: E402

from gpt_train.distributed import Rank  # noqa: E402
from gpt_train.runs import new_run  # noqa: E402
from gpt_train.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--steps", type=positive_int, default=40, help="run steps per round (a multiple of 20)")
    add_heap_option(parser)
    args = parser.parse_args()
    heap = use_heap(args.heap)
    with tempfile.TemporaryDirectory(prefix="grokking-step-") as scratch:
        run = new_run("modadd", {}, Path(scratch) / "run", False, torch.device("cpu"), Rank())
        trainer = Trainer(run, quiet=True)
        every = trainer.settings.eval_every

        def run_steps() -> None:
            for _ in range(args.steps):
                trainer.train_step(trainer.step)
                trainer.step += 1
                if trainer.step % every == 0:
                    trainer.evaluate(trainer.settings.eval_limit)

        twin = builtin_twin(trainer.model)
        s = trainer.settings
        optimizer = torch.optim.AdamW(twin.parameters(), lr=s.lr, betas=(s.beta1, s.beta2), weight_decay=s.weight_decay)
        batch = run.task.batch(trainer.settings.batch_size, torch.Generator().manual_seed(0))

        def twin_steps() -> None:
            for _ in range(args.steps):
                optimizer.zero_grad()
                twin(batch.inputs, batch.targets).loss.backward()
                optimizer.step()

        times = interleaved_rounds([run_steps, twin_steps], args.rounds, warmup=1)
        run_ms, twin_ms = ([t / args.steps * 1e3 for t in side] for side in times)
        ratios = [r / t for r, t in zip(run_ms, twin_ms, strict=True)]
        run.close()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {heap}, {args.rounds} rounds")
    print("| run step, evaluations included (ms) | twin's bare step (ms) | run / twin, median (spread) |")
    print("|---|---|---|")
    spread = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    print(f"| {statistics.median(run_ms):.1f} | {statistics.median(twin_ms):.1f} | {spread} |")


if __name__ == "__main__":
    main()
