"""`gpt-train inspect RUN phases`: grokking's progress measures (Nanda et al. 2023, section 5) at each snapshot of
a modadd run, with the key frequencies of its trained model: the restricted loss falls as the circuit forms, the
excluded loss rises as it takes over, the weight norm shrinks in cleanup (gpt_tasks.builtin.progress_measures
defines them; docs/results/grokking-phases.md shows them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpt_tasks.builtin.modadd import ModAddTask
from gpt_tasks.builtin.progress_measures import KEY_SHARE, ProgressMeasures, key_frequencies
from gpt_train.lab.common import InspectError
from gpt_viz import HELDOUT, THRESHOLD, TRAIN, RunLayout, metric_key
from gpt_viz.phases import LEFT_CHANCE, Phases, grokking_phases

SNAPSHOT_EVERY = 20  # what a run without snapshots is told to keep: modadd's evaluation interval
SPIKE = 0.05  # nats: a training loss above it after the fit is a spike (a fitted modadd model's is below 0.01)

TRAIN_ACCURACY, HELDOUT_ACCURACY = metric_key(TRAIN, "accuracy"), metric_key(HELDOUT, "accuracy")
TRAIN_LOSS, HELDOUT_LOSS = metric_key(TRAIN, "loss"), metric_key(HELDOUT, "loss")


@dataclass(frozen=True)
class GrokkingProgress:
    """A modadd run's p, the key frequencies of its trained model, and one record per snapshot in step order."""

    p: int
    keys: list[int]
    records: list[dict[str, float]]

    @property
    def phases(self) -> Phases:
        return grokking_phases(self.records)

    def at(self, key: str, step: int | None) -> float | None:
        """`key` at `step`, or None for a phase the run never reached (step None)."""
        if step is None:
            return None
        return next(float(r[key]) for r in self.records if r["step"] == step)

    def spike_steps(self) -> list[int]:
        """The snapshots after the fit whose training loss rises above SPIKE: the slingshot (Thilak et al. 2022)."""
        fit = self.phases.fit
        after = [r for r in self.records if fit is not None and r["step"] > fit]
        pairs = zip(after, after[1:], strict=False)
        return [int(now["step"]) for before, now in pairs if before[TRAIN_LOSS] <= SPIKE < now[TRAIN_LOSS]]

    def to_json(self) -> dict[str, Any]:
        phases = self.phases
        return {
            "task": "modadd",
            "p": self.p,
            "key_frequencies": self.keys,
            "key_share": KEY_SHARE,
            "phases": {"fit": phases.fit, "cleanup": phases.cleanup, "generalised": phases.generalised},
            "spikes": self.spike_steps(),
            "records": self.records,
        }


@dataclass(frozen=True)
class SnapshotRun:
    run_dir: Path
    task: ModAddTask
    keys: list[int]
    snapshots: dict[int, Path]
    step: int
    device: torch.device | str
    trust_kernels: bool


def open_snapshot_run(run: str | Path, device: torch.device | str = "cpu", trust_kernels: bool = False) -> SnapshotRun:
    """The modadd run `run` (a directory or a task name) and its key frequencies; refuse one without snapshots."""
    from gpt_train.loading import load_run  # the loading of runs, imported with the command that reads one

    loaded = load_run(run, device, trust_kernels)
    how = f"gpt-train run --task modadd --set snapshot_every={SNAPSHOT_EVERY}"
    if not isinstance(loaded.task, ModAddTask):
        raise InspectError(
            f"phases measures grokking on a modadd run; {loaded.run_dir} is a run of task {loaded.task.name!r} "
            f"(train one with {how})"
        )
    snapshots = RunLayout(loaded.run_dir).snapshots()
    if not snapshots:
        raise InspectError(
            f"{loaded.run_dir} kept no snapshots, and the phases are measured from them; train the run with "
            f"--set snapshot_every={SNAPSHOT_EVERY} ({how})"
        )
    keys = key_frequencies(loaded.model.wte.weight[: loaded.task.params.p])
    return SnapshotRun(loaded.run_dir, loaded.task, keys, snapshots, loaded.step, device, trust_kernels)


def measure_progress(
    run: SnapshotRun | str | Path, progress: Callable[[int], None] = lambda _: None
) -> GrokkingProgress:
    """The measures at each snapshot of `run` (opened, or opened here on the CPU); `progress(1)` after each."""
    from gpt_train.loading import load_snapshots

    if not isinstance(run, SnapshotRun):
        run = open_snapshot_run(run)
    records = []
    for step, model in load_snapshots(run.run_dir, run.device, run.trust_kernels):
        measures = ProgressMeasures.of(model, run.task, run.keys, run.device)
        records.append(
            {
                "step": step,
                TRAIN_ACCURACY: measures.train_accuracy,
                HELDOUT_ACCURACY: measures.heldout_accuracy,
                TRAIN_LOSS: measures.train_loss,
                HELDOUT_LOSS: measures.heldout_loss,
                "restricted_loss": measures.restricted_loss,
                "excluded_loss": measures.excluded_loss,
                "weight_norm": measures.weight_norm,
            }
        )
        progress(1)
    return GrokkingProgress(run.task.params.p, run.keys, records)


TABLE_HEADER = ("at", "step", "train acc", "held-out acc", "train loss", "held-out loss", "restricted loss",
                "excluded loss", "weight norm")  # fmt: skip


def table_rows(result: GrokkingProgress) -> list[tuple[str, ...]]:
    """A row at the first snapshot, at each phase boundary the run reached, and at the last snapshot."""
    phases = result.phases
    named = [
        ("first snapshot", result.records[0]["step"]),
        (f"t_fit (train acc >= {THRESHOLD:g})", phases.fit),
        (f"cleanup from (held-out acc >= {LEFT_CHANCE:g})", phases.cleanup),
        (f"t_gen (held-out acc >= {THRESHOLD:g})", phases.generalised),
        ("last snapshot", result.records[-1]["step"]),
    ]
    keys = (TRAIN_ACCURACY, HELDOUT_ACCURACY, TRAIN_LOSS, HELDOUT_LOSS, "restricted_loss", "excluded_loss")
    rows = []
    for name, step in named:
        if step is not None:
            values = [f"{result.at(key, step):.4f}" for key in keys]
            rows.append((name, f"{int(step):,}", *values, f"{result.at('weight_norm', step):.1f}"))
    return rows


def _moves(before: float, after: float, digits: int = 2) -> str:
    """The change in words: "falls from 5.04 to 1.40", "rises from ...", "stays at ..."."""
    if after == before:
        return f"stays at {before:.{digits}f}"
    return f"{'falls' if after < before else 'rises'} from {before:.{digits}f} to {after:.{digits}f}"


def phases_findings(result: GrokkingProgress) -> list[str]:
    """What the measures show, phase by phase, in words: each sentence built from the run's own numbers."""
    f, at = result.phases, result.at
    keys = ", ".join(map(str, result.keys)) or "none"
    found = [
        f"key frequencies of the trained model: {keys} (each holding at least {KEY_SHARE:.0%} of its number "
        "embedding's non-constant Fourier power); the restricted loss keeps only their part of the logits, the "
        "excluded loss removes it"
    ]
    first, last = result.records[0]["step"], result.records[-1]["step"]
    if f.fit is None:
        found.append(
            f"memorisation: train accuracy never reaches {THRESHOLD:g} by step {last:,}; the run never fitted its "
            "training set, so no later phase can be told apart"
        )
        return found
    found.append(
        f"memorisation, steps {first:,}-{f.fit:,}: train accuracy reaches {THRESHOLD:g} at step {f.fit:,} while "
        f"held-out accuracy is {at(HELDOUT_ACCURACY, f.fit):.2f}, and the excluded loss is "
        f"{at('excluded_loss', f.fit):.2f} nats"
    )
    end = f.cleanup if f.cleanup is not None else last
    formation = (
        f"the restricted loss {_moves(at('restricted_loss', f.fit), at('restricted_loss', end))} nats while the "
        f"held-out loss is {at(HELDOUT_LOSS, end):.2f} (chance ln {result.p} = {math.log(result.p):.2f}), and the "
        f"excluded loss {_moves(at('excluded_loss', f.fit), at('excluded_loss', end))}"
    )
    if f.cleanup is None:
        found.append(
            f"circuit formation from step {f.fit:,}: held-out accuracy never reaches {LEFT_CHANCE:g} by step "
            f"{last:,}; so far {formation}; train longer to see it generalise"
        )
        return found
    found.append(f"circuit formation, steps {f.fit:,}-{f.cleanup:,}: {formation}")
    end = f.generalised if f.generalised is not None else last
    cleanup = (
        f"the weight norm {_moves(at('weight_norm', f.cleanup), at('weight_norm', end), 1)} and the held-out loss "
        f"{_moves(at(HELDOUT_LOSS, f.cleanup), at(HELDOUT_LOSS, end))} nats"
    )
    if f.generalised is None:
        found.append(
            f"cleanup from step {f.cleanup:,}: held-out accuracy never reaches {THRESHOLD:g} by step {last:,}; "
            f"so far {cleanup}"
        )
    else:
        found.append(
            f"cleanup, steps {f.cleanup:,}-{f.generalised:,}: held-out accuracy reaches {THRESHOLD:g} at step "
            f"{f.generalised:,}; {cleanup}"
        )
    spikes = result.spike_steps()
    if spikes:
        steps = ", ".join(f"{step:,}" for step in spikes)
        found.append(
            f"the training loss spikes above {SPIKE:g} nats {len(spikes)} time{'s' * (len(spikes) > 1)} after the "
            f"fit (at steps {steps}): the slingshot (Thilak et al. 2022)"
        )
    return found
