"""`learn train`: the seed task trained with every kernel the learner has passed, beside gpt-core's own.

The learner's kernels go in as `--kernel SLOT=module:function` would give them (the module is the step's
file in the learner's folder), so the run verifies them, records them in config.json and trains exactly
as `gpt-train run --kernel` does; gpt-core's run has the same task, settings and seed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from gpt_train.distributed import Rank
from gpt_train.learn.progress import status
from gpt_train.learn.steps import STEPS, Step
from gpt_train.runs import new_run
from gpt_train.trainer import train

TASK = "sort"
METRIC = "heldout_exact_match"


@dataclass(frozen=True)
class Figure:
    """A finished run's held-out exact match, over how many examples."""

    exact_match: float
    examples: int
    run_dir: Path

    @property
    def wrong(self) -> int:
        return round((1.0 - self.exact_match) * self.examples)


def passed_kernels(folder: Path) -> dict[str, Step]:
    """For each kernel slot, the latest step filling it that the folder passes."""
    chosen: dict[str, Step] = {}
    for step in STEPS:
        if step.slot is not None and status(folder, step) == "passed":
            chosen[step.slot] = step
    return chosen


def kernel_choices(steps: dict[str, Step]) -> dict[str, str]:
    """slot -> `module:function`, the module being the step's file in the learner's folder."""
    return {slot: f"{step.name}:{step.function}" for slot, step in steps.items()}


def train_sort(folder: Path, kernels: dict[str, str], out: Path, device: torch.device, quiet: bool) -> Figure:
    """One run of the seed task at its defaults with `kernels`, into `out` (replaced); its final held-out figure."""
    with _importable(folder, [choice.partition(":")[0] for choice in kernels.values()]):
        handed = new_run(TASK, {}, out, force=True, device=device, rank=Rank(), kernels=kernels)
        outcome = train(handed, quiet=quiet)
    final = outcome.final
    return Figure(final[METRIC], int(final["heldout_examples"]), out)


def finished_figure(out: Path) -> Figure | None:
    """The figure of a finished run already in `out`, if there is one: a final.json holding an exact match in
    [0, 1] over a whole number of examples (anything else, a damaged or foreign file, is none, and the run is
    trained again)."""
    try:
        final = json.loads((out / "final.json").read_text())
        exact_match, examples = final[METRIC], final["heldout_examples"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = all(isinstance(n, int | float) and not isinstance(n, bool) for n in (exact_match, examples))
    if not numbers or not (0.0 <= exact_match <= 1.0 and examples >= 1 and float(examples).is_integer()):
        return None
    return Figure(float(exact_match), int(examples), out)


class _importable:
    """The learner's folder first on sys.path, and the step modules imported afresh from it."""

    def __init__(self, folder: Path, modules: list[str]):
        self.folder, self.modules = str(folder.resolve()), modules

    def __enter__(self) -> None:
        for name in self.modules:
            sys.modules.pop(name, None)
        sys.path.insert(0, self.folder)

    def __exit__(self, *exc: object) -> None:
        sys.path.remove(self.folder)
