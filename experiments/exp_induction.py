"""Induction heads and the in-context-learning phase change (Olsson et al. 2022), watched while they form.

python experiments/exp_induction.py            # 3 seeds x (2-layer repeats, 1-layer repeats, 2-layer shakespeare)
python experiments/exp_induction.py --quick

Every run is an attention-only model (--set mlp=false) logging the induction probes at each evaluation. The
phase change is found by `gpt_viz.induction.sharpest_move`; the induction heads are then zero-ablated in the
trained model and the held-out loss late and early in the context measured again.
"""

from __future__ import annotations

import time

import torch
from common import Context, Run, context_from_args, markdown_table, report, shakespeare_path, train_all

from gpt_tasks import get_task
from gpt_tasks.probes import icl_positions, position_losses
from gpt_train.runs import open_run
from gpt_viz import induction_formation, phase_change, save_figure
from gpt_viz.induction import head_keys

SEEDS = (1, 2, 3)
ATTENTION_ONLY = ["--set", "mlp=false", "--set", "n_embd=64", "--set", "n_head=2", "--set", "pos=rope"]
REPEATS = ["--task", "repeats", "--set", "vocab=62", "--set", "lr=5e-3", "--set", "weight_decay=0", *ATTENTION_ONLY]
SHAKESPEARE_STEPS = 1500
HEAD = 0.3  # a last-layer head whose final induction score is at least this is ablated
QUICK = ["--steps", "40", "--set", "eval_every=20"]


def specs(ctx: Context) -> dict[str, list[str]]:
    quick = QUICK if ctx.quick else []
    text = ["--task", "text", "--data", str(shakespeare_path(ctx)), "--set", "block_size=64", *ATTENTION_ONLY]
    text += ["--steps", str(SHAKESPEARE_STEPS), "--set", "eval_every=50", "--set", "lr=3e-3"]
    found = {}
    for seed in SEEDS[:1] if ctx.quick else SEEDS:
        at = ["--set", f"seed={seed}", *quick]
        found[f"induction-repeats-2L-s{seed}"] = [*REPEATS, "--set", "n_layer=2", *at]
        found[f"induction-repeats-1L-s{seed}"] = [*REPEATS, "--set", "n_layer=1", *at]
        found[f"induction-shakespeare-2L-s{seed}"] = [*text, "--set", "n_layer=2", *at]
    return found


def ablated_gap(run: Run, heads: list[tuple[int, int]]) -> tuple[float, float]:
    """The held-out late-minus-early loss of the trained model on its task's probe batch, with `heads`
    ((layer, head) pairs) zero-ablated (their z set to 0)."""
    saved = open_run(run.run_dir, "cpu")
    task = get_task(saved.config.task, **saved.config.task_params)
    batch = task.probe_batch()
    early, late = icl_positions(task.block_size)

    def zero(layer: int):
        def hook(z: torch.Tensor, name: str) -> torch.Tensor:  # (B, H, T, d)
            keep = torch.ones(z.shape[1], 1, 1, dtype=z.dtype)
            keep[[head for at, head in heads if at == layer]] = 0.0
            return z * keep

        return hook

    layers = sorted({layer for layer, _ in heads})
    with torch.no_grad(), saved.model.hooks({f"blocks.{layer}.z": zero(layer) for layer in layers}):
        losses = position_losses(saved.model(batch.inputs).logits, batch.targets)
    return float(losses[early]), float(losses[late])


def analyse(run: Run) -> dict:
    """The phase change of one run, its induction heads and what ablating them does."""
    records = run.metrics
    induction = head_keys(records, "induction")
    last = max(layer for layer, _ in induction)
    change = phase_change(records)
    final = next(record for record in reversed(records) if "heldout_probe_icl_score" in record)
    heads = [(layer, head) for (layer, head), key in induction.items() if layer == last and final[key] >= HEAD]
    before = ablated_gap(run, [])
    after = ablated_gap(run, heads) if heads else before
    return {"change": change, "heads": heads, "before": before, "after": after, "final": final}


def run(ctx: Context):
    start = time.perf_counter()
    runs = train_all(ctx, specs(ctx))
    rows = []
    pictures = []
    for name, result in runs.items():
        found = analyse(result)
        change = found["change"]
        (early, late), (ablated_early, ablated_late) = found["before"], found["after"]
        moves = "none" if change is None else (
            f"step {change.step}: ICL {change.icl_move:+.2f}, l{change.head[0]}h{change.head[1]} induction "
            f"{change.induction_move:+.2f}; previous-token ≥ 0.5 from step {change.previous_token_step}"
        )  # fmt: skip
        heads = ", ".join(f"l{layer}h{head}" for layer, head in found["heads"]) or "none"
        rows.append([name, f"{result.final['heldout_loss']:.3f}", f"{found['final']['heldout_probe_icl_score']:+.3f}",
                     moves, heads, f"{late - early:+.3f}", f"{ablated_late - ablated_early:+.3f}",
                     f"{result.clock:.0f} s"])  # fmt: skip
        if name.endswith("-s1"):
            picture = ctx.out / f"{name}.png"
            save_figure(induction_formation(result.run_dir, phase_step=change.step if change else None, title=name),
                        picture)  # fmt: skip
            pictures.append(f"![{name}]({picture.name})")
    header = ["run", "held-out loss", "ICL score", "phase change (sharpest moves)", "induction heads (final ≥ 0.3)",
              "late − early loss", "… heads zero-ablated", "run's clock"]  # fmt: skip
    body = markdown_table(header, rows) + "\n\n" + "\n\n".join(pictures)
    commands = [f"gpt-train run {' '.join(args)}" for args in specs(ctx).values()]
    return report(ctx, "induction", "Induction heads and in-context learning", commands, body,
                  time.perf_counter() - start)  # fmt: skip


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
