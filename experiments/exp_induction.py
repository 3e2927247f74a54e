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
from common import Context, Run, context_from_args, markdown_table, shakespeare_path, train_all

import gpt_core
from gpt_tasks import get_task
from gpt_tasks.probes import icl_positions, position_losses
from gpt_train.loading import load_run
from gpt_viz import induction_formation, phase_change, save_figure
from gpt_viz.induction import Move, head_keys, previous_token_step, sharpest_move
from gpt_viz.run_data import metric_series

SEEDS = (1, 2, 3)
REPEATS = ["--task", "repeats", "--set", "eval_every=10"]  # the task's defaults: 2 layers, 2 heads, attention-only
SHAKESPEARE = ["--set", "block_size=64", "--set", "mlp=false", "--set", "n_embd=64", "--set", "n_head=2"]
SHAKESPEARE += ["--set", "pos=rope", "--set", "lr=3e-3", "--set", "batch_size=32", "--steps", "6000"]
SHAKESPEARE += ["--set", "eval_every=200"]
HEAD = 0.5  # a last-layer head whose final induction score is at least this is ablated
QUICK = ["--steps", "40", "--set", "eval_every=20"]


def specs(ctx: Context) -> dict[str, list[str]]:
    quick = QUICK if ctx.quick else []
    text = ["--task", "text", "--data", str(shakespeare_path(ctx)), *SHAKESPEARE]
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
    saved = load_run(run.run_dir)
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
    previous = previous_token_step(records)
    return {"change": change, "heads": heads, "before": before, "after": after, "final": final,
            "previous_token_step": previous, "previous_rise": layer0_rise(records, "previous_token")}  # fmt: skip


QUESTION = """\
Does an attention-only transformer on this code base go through the in-context-learning phase change of
Olsson et al. (2022), on a CPU, within minutes: a step at which the loss late in the context falls below the loss
early in it and, at the same step, second-layer heads start attending from a token to the one after its earlier
occurrence (induction heads), fed by a previous-token head in the first layer? And are those heads what does the
in-context learning: does zero-ablating them close the late-minus-early gap? A one-layer model, which cannot
compose heads, is the control."""

RULE = """\
**The measures** (logged at every evaluation, `heldout_probe_*`; `gpt_tasks.probes`): a head's *induction score* is
the mean attention from each token of the second copy of 64 fixed random sequences written twice to the token
after its earlier occurrence; the *previous-token score* the mean attention to the token before; the *ICL score*
the held-out loss at position round(T·500/512) minus the loss at round(T·50/512), Olsson et al.'s tokens 500 and 50
of 512 scaled to the block (T = 32: positions 31 and 3; T = 64: 62 and 6). **Sharp** (`gpt_viz.induction`): the
largest move of a series between two evaluations at most a tenth of the run apart is sharp when it covers at
least half of the series' whole range and at least 0.1. The **phase change** is the sharp rise of a last-layer
head's induction score, ending at 0.5 or more (an induction head), that overlaps a sharp fall of the ICL score;
its step is the first evaluation past the middle of that rise. The last layer's heads whose final induction
score is at least 0.5 are the ones zero-ablated (their z set to 0) for the last column; both loss columns are
measured on the task's 256 held-out probe sequences."""

REFERENCES = """\
- Olsson et al. 2022, "In-context learning and induction heads" (Transformer Circuits Thread): the ICL score, the
  phase change, prefix-matching scores, the ablations.
- Elhage et al. 2021, "A mathematical framework for transformer circuits" (Transformer Circuits Thread): two-layer
  attention-only models, K-composition of a previous-token head into an induction head."""


def run(ctx: Context):
    start = time.perf_counter()
    runs = train_all(ctx, specs(ctx))
    rows, pictures, found = [], [], {}
    for name, result in runs.items():
        found[name] = analysis = analyse(result)
        rows.append(table_row(name, result, analysis))
        if name.endswith("-s1"):
            change = analysis["change"]
            figure = induction_formation(result.run_dir, phase_step=change.step if change else None, title=name)
            save_figure(figure, ctx.out / f"{name}.png")
            pictures.append(f"![{name}]({name}.png)")
    header = ["run", "held-out loss", "phase change: step (ICL move, induction move)", "induction rise (steps)",
              "layer-0 previous-token rise", "previous-token ≥ 0.5 from", "induction heads (final ≥ 0.5)",
              "late − early loss (ICL score)", "… with them zero-ablated"]  # fmt: skip
    data = shakespeare_path(ctx)  # the page names the file, never where it lies on the measuring machine
    commands = "\n".join(
        [
            "python experiments/exp_induction.py  # trains:",
            *(f"gpt-train run {' '.join(a)}".replace(str(data), data.name) for a in specs(ctx).values()),
        ]
    )
    text = (
        f"## Induction heads and in-context learning\n\n{QUESTION}\n\n```\n{commands}\n```\n\n"
        f"Measured with gpt-from-scratch {gpt_core.__version__} on {ctx.machine()}; the experiment takes about "
        f"{time.perf_counter() - start:.0f} s.\n\n{markdown_table(header, rows)}\n\n{RULE}\n\n"
        + "\n\n".join(pictures)
        + f"\n\n### What it means\n\n{meaning(found)}\n\n### References\n\n{REFERENCES}\n"
    )
    path = ctx.out / "induction.md"
    path.write_text(text)
    print(text, flush=True)
    return path


def table_row(name: str, result: Run, analysis: dict) -> list[str]:
    change = analysis["change"]
    (early, late), (ablated_early, ablated_late) = analysis["before"], analysis["after"]
    moves = "none"
    if change is not None:
        layer, head = change.head
        moves = f"{change.step} (ICL {change.icl_move:+.2f} nats, l{layer}h{head} {change.induction_move:+.2f})"
    previous = analysis["previous_token_step"]
    heads = ", ".join(f"l{layer}h{head}" for layer, head in analysis["heads"]) or "none"
    ablated = f"{ablated_late - ablated_early:+.3f}" if analysis["heads"] else "(none ablated)"
    induction_rise = "none" if change is None else "→".join(map(str, change.rise))
    up = analysis["previous_rise"]
    previous_rise = "none" if up is None else f"{up.start}→{up.end} ({up.size:+.2f})"
    return [name, f"{result.final['heldout_loss']:.3f}", moves, induction_rise, previous_rise,
            "never" if previous is None else str(previous), heads, f"{late - early:+.3f}", ablated]  # fmt: skip


def layer0_rise(records: list[dict], kind: str) -> Move | None:
    """The sharp rise of the layer-0 head whose `kind` score rises most (None: no head's is sharp)."""
    keys = [key for (layer, _), key in head_keys(records, kind).items() if layer == 0]
    moves = [move for move in (sharpest_move(*metric_series(records, key), sign=+1) for key in keys) if move]
    return max(moves, key=lambda m: m.size) if moves else None


def meaning(found: dict[str, dict]) -> str:
    """What the table says, in sentences whose numbers are read off it."""
    groups = {kind: [a for name, a in found.items() if f"-{kind}-" in name] for kind in KINDS}
    lines = [phase_line(kind, group) for kind, group in groups.items() if group]
    two_layer = [a for a in groups["repeats-2L"] if a["heads"]]
    if two_layer:
        gap = [a["before"][1] - a["before"][0] for a in two_layer]
        ablated = [a["after"][1] - a["after"][0] for a in two_layer]
        lines.append(
            f"- Zero-ablating the induction heads of the trained 2-layer repeats models moves the late-minus-early "
            f"loss from {_span(gap)} nats to {_span(ablated)}"
            + (": the gap closes, and the late positions are then predicted worse than the early ones."
               if min(ablated) > 0 else ".")
        )  # fmt: skip
    lines.append(
        "- The induction score is read on sequences written twice, where the earlier occurrence is always half a "
        "block back, so a head that reaches back by position alone scores there too: a rise of the score before "
        "the previous-token head need not be an induction head. The jump that comes with the ICL score's fall is."
    )
    return "\n".join(lines)


KINDS = ("repeats-2L", "repeats-1L", "shakespeare-2L")


def phase_line(kind: str, group: list[dict]) -> str:
    changes = [a["change"] for a in group if a["change"] is not None]
    best = [max(v for k, v in a["final"].items() if "_probe_induction_" in k) for a in group]
    icl = [a["final"]["heldout_probe_icl_score"] for a in group]
    line = f"- {kind}: a phase change in {len(changes)} of {len(group)} seeds"
    if changes:
        line += (
            f", at steps {', '.join(str(c.step) for c in changes)}; the ICL score fell by "
            f"{_span([-c.icl_move for c in changes])} nats and the rising head's induction score rose by "
            f"{_span([c.induction_move for c in changes])}; a layer-0 head's previous-token score reached 0.5 at "
            f"{', '.join(_relative(c) for c in changes)}; its sharp rise began at steps "
            f"{', '.join(str(a['previous_rise'].start) if a['previous_rise'] else '-' for a in group if a['change'])}"
            f", the induction rise at {', '.join(str(c.rise[0]) for c in changes)}"
        )
    return line + f". Final ICL score {_span(icl)} nats; best final induction score of any head {_span(best)}."


def _relative(change) -> str:
    if change.previous_token_step is None:
        return "no step"
    if change.previous_token_step == change.step:
        return "the same evaluation"
    return f"step {change.previous_token_step} ({change.previous_token_step - change.step:+d})"


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}" if len(values) == 1 else f"{min(values):.2f} to {max(values):.2f}"


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
