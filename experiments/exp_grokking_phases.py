"""Grokking's three phases, measured while the model trains (Nanda et al. 2023, "Progress measures for grokking
via mechanistic interpretability", section 5).

The default modadd run, with the weights kept at every evaluation (`--set snapshot_every=20`): the same run as
`gpt-train run --task modadd --seed SEED`, step for step. The measures are `gpt-train inspect RUN phases`'s
(gpt_train.lab.phases): the key frequencies are read from the trained model's number embedding; at every snapshot
the restricted loss (held-out loss of the logits' key-frequency part alone), the excluded loss (training loss with
that part removed), the weight norm and each split's accuracy and loss are computed from that step's weights. The
phases' boundaries come from the accuracies alone: memorisation until the training set is fitted, circuit
formation until held-out accuracy leaves chance, cleanup until it is near perfect.

    python experiments/exp_grokking_phases.py
    python experiments/exp_grokking_phases.py --quick
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from common import Context, Run, context_from_args, markdown_table, report, span, train_all

import gpt_train
import gpt_viz
from gpt_tasks.builtin.progress_measures import KEY_SHARE
from gpt_train.config import RunConfig
from gpt_train.lab.phases import HELDOUT_LOSS, SPIKE, GrokkingProgress, measure_progress
from gpt_viz import THRESHOLD
from gpt_viz.phases import LEFT_CHANCE, Phases, first_below

PUBLISHED_SEEDS = (1, 2, 3)  # the seeds of docs/results/grokking.md
OWN_SEEDS = (7, 42)
EVERY = 20
NANDA_LR = 1e-3  # Nanda et al.'s learning rate
QUICK = ("--set", "p=23", "--set", "eval_every=10", "--steps", "60")
QUICK_EVERY = 10
PICTURED = (1, 42)
HEADER = ["seed", "key frequencies", "t_fit", "cleanup from", "t_gen",
          "restricted loss at t_fit / cleanup", "held-out loss at t_fit / cleanup",
          "restricted / held-out loss first <= ln(p)/2", "excluded loss at t_fit / cleanup / t_gen",
          "weight norm at 0 / t_fit / cleanup / t_gen / end", "training-loss spikes", "run's clock"]  # fmt: skip


@dataclass(frozen=True)
class Measured:
    """One seed's run and its progress measures at every snapshot (`gpt-train inspect RUN phases`'s): its key
    frequencies, its records and its phases."""

    seed: int
    run: Run
    progress: GrokkingProgress

    @property
    def keys(self) -> list[int]:
        return self.progress.keys

    @property
    def records(self) -> list[dict]:
        return self.progress.records

    @property
    def phases(self) -> Phases:
        return self.progress.phases

    @property
    def initial_norm(self) -> float:
        return self.progress.at("weight_norm", 0)

    def at(self, key: str, step: int | None) -> float | None:
        return self.progress.at(key, step)

    def spikes(self) -> int:
        return len(self.progress.spike_steps())

    def spikes_shrinking_the_norm(self) -> int:
        """Spikes at which the weight norm is below the previous snapshot's."""
        norms = {r["step"]: r["weight_norm"] for r in self.records}
        steps = sorted(norms)
        previous = dict(zip(steps[1:], steps, strict=False))
        return sum(1 for step in self.progress.spike_steps() if norms[step] < norms[previous[step]])


def measure(seed: int, run: Run) -> Measured:
    """The progress measures of the run at every snapshot, with the key frequencies of its trained model."""
    return Measured(seed, run, measure_progress(run.run_dir))


def text(value: float | None, form: str = "{:.2f}") -> str:
    return "-" if value is None else form.format(value)


def row(m: Measured, chance: float) -> list:
    f = m.phases
    moments = (f.fit, f.cleanup)
    restricted_first, heldout_first = (first_below(m.records, k, chance / 2) for k in ("restricted_loss", HELDOUT_LOSS))
    norms = [m.initial_norm, *(m.at("weight_norm", s) for s in (f.fit, f.cleanup, f.generalised)),
             m.records[-1]["weight_norm"]]  # fmt: skip
    return [
        m.seed,
        ", ".join(map(str, m.keys)),
        text(f.fit, "{}"),
        text(f.cleanup, "{}"),
        text(f.generalised, "{}"),
        " / ".join(text(m.at("restricted_loss", s)) for s in moments),
        " / ".join(text(m.at(HELDOUT_LOSS, s)) for s in moments),
        f"{text(restricted_first, '{}')} / {text(heldout_first, '{}')}",
        " / ".join(text(m.at("excluded_loss", s)) for s in (*moments, f.generalised)),
        " / ".join(text(n, "{:.1f}") for n in norms),
        m.spikes(),
        f"{m.run.clock:.0f} s",
    ]


def checks(m: Measured, chance: float) -> list[str]:
    """What the paper's account says of this run that did not hold, in words (none: all held)."""
    f = m.phases
    if None in (f.fit, f.cleanup, f.generalised):
        return ["it did not reach every phase"]
    failed = []
    restricted_first = first_below(m.records, "restricted_loss", chance / 2)
    heldout_first = first_below(m.records, HELDOUT_LOSS, chance / 2)
    if restricted_first is None or heldout_first is None or restricted_first >= heldout_first:
        failed.append("the restricted loss did not fall before the held-out loss")
    if not m.at("excluded_loss", f.cleanup) > 2 * m.at("excluded_loss", f.fit):
        failed.append("the excluded loss did not rise through circuit formation")
    if not m.at("weight_norm", f.generalised) < m.at("weight_norm", f.cleanup):
        failed.append("the weight norm did not fall through cleanup")
    return failed


def nats(values: Sequence[float]) -> str:
    """The range of the seeds' losses, to two decimals."""
    return span(values, "{:.2f}")


def comparison(measured: Sequence[Measured], chance: float, lr: float) -> str:
    """Our runs set point by point against Nanda et al.'s account, with the numbers that support each point;
    empty unless every run reached every phase with the account's three signs."""
    if not measured or any(checks(m, chance) for m in measured):
        return ""
    phase = lambda name: [getattr(m.phases, name) for m in measured]
    at = lambda key, name: [m.at(key, getattr(m.phases, name)) for m in measured]
    fit, cleanup, generalised = phase("fit"), phase("cleanup"), phase("generalised")
    formation = [c - f for c, f in zip(cleanup, fit, strict=True)]
    clean = [g - c for g, c in zip(generalised, cleanup, strict=True)]
    norms = {name: at("weight_norm", name) for name in ("fit", "cleanup", "generalised")}
    formation_drop = [a - b for a, b in zip(norms["fit"], norms["cleanup"], strict=True)]
    cleanup_drop = [a - b for a, b in zip(norms["cleanup"], norms["generalised"], strict=True)]
    steps = lambda values: span(values, "{}")
    norm = lambda values: span(values, "{:.1f}")
    grown = [fitted > m.initial_norm for fitted, m in zip(norms["fit"], measured, strict=True)]
    grows = "first grows" if all(grown) else "first shrinks" if not any(grown) else "first grows or shrinks"
    points = [
        f"- **Key frequencies.** Theirs are 5 in the mainline model; ours {steps([len(m.keys) for m in measured])} "
        f"per seed (those holding at least {KEY_SHARE:.0%} of the embedding's non-constant Fourier power), a "
        "different set for every seed.",
        f"- **Memorisation.** As in the paper, the training set is fitted first (t_fit {steps(fit)}) and the "
        f"excluded loss is still low there ({nats(at('excluded_loss', 'fit'))} nats, against "
        f"{nats(at('excluded_loss', 'cleanup'))} when cleanup starts): memorising does not go through the key "
        "frequencies.",
        f"- **Circuit formation** ({steps(formation)} steps; theirs about 8,000 epochs at a {lr / NANDA_LR:g}x smaller "
        "learning rate). As in the paper, the restricted loss falls while the held-out loss stays high: when cleanup "
        f"starts it is {nats(at('restricted_loss', 'cleanup'))} nats against a held-out loss of "
        f"{nats(at(HELDOUT_LOSS, 'cleanup'))} (chance {chance:.2f}), and it falls below ln(p)/2 before the held-out "
        f"loss does on every seed. The excluded loss rises from {nats(at('excluded_loss', 'fit'))} to "
        f"{nats(at('excluded_loss', 'cleanup'))} nats. Unlike the paper, where the weight norm falls smoothly from "
        f"the start, ours starts large ({norm([m.initial_norm for m in measured])} at step 0: 8x GPT-2's "
        f"initialisation, Omnigrok's lever) and {grows} while the model memorises "
        f"({norm(at('weight_norm', 'fit'))} at t_fit); through circuit formation it falls by "
        f"{norm(formation_drop)}, in steps at the spikes (below).",
        f"- **Cleanup** ({steps(clean)} steps; theirs about 3,600 epochs). As in the paper, the held-out loss falls "
        f"steeply and the weight norm with it, by {norm(cleanup_drop)} to {norm(at('weight_norm', 'generalised'))} "
        "by t_gen "
        f"({steps(generalised)}), and the excluded loss keeps rising ({nats(at('excluded_loss', 'generalised'))} "
        "nats at t_gen): what is left outside the key frequencies no longer fits the training set.",
        f"- **Spikes.** Unlike the paper's smooth curves, our training loss jumps above {SPIKE} nats and recovers "
        f"{steps([m.spikes() for m in measured])} times a run after the fit (the table's spikes column), and at "
        f"{sum(m.spikes_shrinking_the_norm() for m in measured)} of the {sum(m.spikes() for m in measured)} jumps the "
        "weight norm falls with it (the picture); Thilak et al. (2022) describe such spikes with adaptive "
        "optimisers as the slingshot mechanism.",
    ]
    return "Point by point against Nanda et al.'s account (their section 5.2):\n\n" + "\n".join(points)


def run(ctx: Context):
    start = time.perf_counter()
    seeds = PUBLISHED_SEEDS[:1] if ctx.quick else PUBLISHED_SEEDS + OWN_SEEDS
    every = QUICK_EVERY if ctx.quick else EVERY
    extra = list(QUICK) if ctx.quick else []
    args = {s: ["--task", "modadd", "--seed", str(s), *extra, "--set", f"snapshot_every={every}"] for s in seeds}
    runs = train_all(ctx, {f"grokking-phases-seed{s}": a for s, a in args.items()})
    measured = [measure(s, runs[f"grokking-phases-seed{s}"]) for s in seeds]
    p = gpt_train.load_run(measured[0].run.run_dir).task.params.p
    chance = math.log(p)
    rows = [row(m, chance) for m in measured]
    failures = [f"seed {m.seed}: {'; '.join(checks(m, chance))}" for m in measured if checks(m, chance)]
    pictures = []
    for m in measured:
        if m.seed in PICTURED or ctx.quick:
            name = f"grokking-phases-seed{m.seed}.png"
            gpt_viz.save_figure(gpt_viz.progress_measures(m.records, title=f"seed {m.seed}"), ctx.out / name)
            pictures.append(f"![{name[:-4]}]({name})")
    body = (
        f"Seeds {', '.join(str(s) for s in seeds if s in PUBLISHED_SEEDS)} are the grokking page's"
        + (
            f"; {', '.join(str(s) for s in seeds if s in OWN_SEEDS)} are this page's own"
            if set(seeds) & set(OWN_SEEDS)
            else ""
        )
        + f". t_fit: the first evaluation with train accuracy >= {THRESHOLD}; cleanup from: the first after it with "
        f"held-out accuracy >= {LEFT_CHANCE}; t_gen: the first with held-out accuracy >= {THRESHOLD}. Losses in "
        f"nats (chance ln({p}) = {chance:.2f}); the restricted loss is measured on the held-out pairs, the excluded "
        "loss on the training pairs, both with the key frequencies of the run's own trained model; only the number "
        "logits are projected (the logit of '=' is kept).\n\n"
        + markdown_table(HEADER, rows)
        + "\n\nRestricted loss falling before held-out loss, excluded loss rising through circuit formation (to more "
        "than twice its value at t_fit), weight norm falling through cleanup: "
        + ("**held on every seed**." if not failures else "**not on every seed**: " + "; ".join(failures) + ".")
        + "\n\n"
        + comparison(measured, chance, RunConfig.load(measured[0].run.run_dir).train.lr)
        + "\n\n"
        + "\n\n".join(pictures)
    )
    commands = [
        " ".join(["gpt-train run --task modadd --seed SEED", *extra, "--set", f"snapshot_every={every}"]),
        "gpt-train inspect RUN phases",
    ]
    question = (
        "Does our grokking run go through the three phases Nanda et al. (2023) read off theirs (memorisation, "
        "circuit formation, cleanup), told apart by their progress measures computed at every evaluation? The "
        "measures: the *key frequencies* are the few frequencies k at which the trained model writes each number a "
        f"into its embedding, as the waves cos(2πka/p) and sin(2πka/p): those holding at least {KEY_SHARE:.0%} of "
        "the embedding's non-constant Fourier power. The *restricted loss* is the held-out loss of the logits cut "
        "down to their key-frequency part (and each answer's mean over the pairs): the Fourier circuit alone, "
        "without what memorising adds; it falls as the circuit forms. The *excluded loss* is the training loss of "
        "the logits with that part removed: the training pairs answered without the circuit; it rises as the "
        "circuit takes over from memorisation. `gpt-train inspect RUN phases` measures them on your own modadd "
        "run from its snapshots."
    )
    wall = time.perf_counter() - start
    return report(ctx, "grokking-phases", "3c. Grokking's three phases", commands, body, wall, question)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
