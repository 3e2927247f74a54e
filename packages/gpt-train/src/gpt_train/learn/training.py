"""`learn train`: the seed task trained on the learner's GPT and every kernel they have passed (as `--kernel` gives
them), beside the same run on gpt-core's. The learner's GPT computes on the parameters gpt-core's GPT holds, whose
hooks serve the probes and pictures and whose checkpoint `eval`, `sample` and `inspect` read."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from gpt_core import GPT, GPTOutput
from gpt_train.config import resolve_run_config
from gpt_train.distributed import Rank
from gpt_train.errors import TrainError
from gpt_train.learn.loading import LearnerError, learner_function, load_module
from gpt_train.learn.progress import status
from gpt_train.learn.steps import BY_NAME, STEPS, Step
from gpt_train.progress import format_loss
from gpt_train.runs import Run, is_run_of, new_run
from gpt_train.trainer import Trainer, train

TASK = "sort"
METRIC = "heldout_exact_match"
EXAMPLES = "heldout_examples"
MODEL_STEP = BY_NAME["model"]


@dataclass(frozen=True)
class Figure:
    exact_match: float
    examples: int
    run_dir: Path

    @property
    def wrong(self) -> int:
        return round((1.0 - self.exact_match) * self.examples)


def passed_kernels(folder: Path) -> dict[str, Step]:
    """For each kernel slot, the latest step filling it that the folder passes."""
    return {step.slot: step for step in STEPS if step.slot is not None and status(folder, step) == "passed"}


def passed_model(folder: Path) -> Path | None:
    return folder / MODEL_STEP.file_name if status(folder, MODEL_STEP) == "passed" else None


def learners_model_class(path: Path) -> type[nn.Module]:
    """The GPT class of the learner's model file; TrainError if it cannot be loaded."""
    try:
        return learner_function(load_module(path), path, MODEL_STEP.function, MODEL_STEP.parameters)
    except LearnerError as error:
        raise TrainError(str(error)) from None


def train_sort(folder: Path, kernels: dict[str, str], out: Path, device: torch.device,
               report: Callable[[str], None] = lambda line: None, model_class: type[nn.Module] | None = None,
               values: dict[str, Any] | None = None) -> Figure:  # fmt: skip
    """One run of the seed task (with the `--set` `values`) with `kernels` and, given `model_class`, the learner's GPT,
    into `out` (replaced); its final held-out figure. Each evaluation is a line to `report`."""
    with _importable(folder, [choice.partition(":")[0] for choice in kernels.values()]):
        handed = new_run(TASK, values or {}, out, force=True, device=device, rank=Rank(), kernels=kernels)
        outcome = train(handed, quiet=True, trainer_class=CourseTrainer, report=report, model_class=model_class)
    if outcome.reason != "finished":
        raise TrainError(f"the run in {out} {outcome.reason} at step {outcome.step}: {outcome.detail}")
    return Figure(outcome.final[METRIC], int(outcome.final[EXAMPLES]), out)


def finished_figure(out: Path) -> Figure | None:
    """The figure of gpt-core's finished run already in `out`: the seed task's run with gpt-core's GPT and kernels
    (config.json says so) and a final.json with an exact match in [0, 1] over a whole number of examples (else None,
    and the run is trained again: another run there was set beside the learner's as the same one)."""
    if not is_run_of(out, resolve_run_config(TASK, {})[0]):
        return None
    try:
        final = json.loads((out / "final.json").read_text())
        exact_match, examples = final[METRIC], final[EXAMPLES]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = all(isinstance(n, int | float) and not isinstance(n, bool) for n in (exact_match, examples))
    if not numbers or not (0.0 <= exact_match <= 1.0 and examples >= 1 and float(examples).is_integer()):
        return None
    return Figure(float(exact_match), int(examples), out)


def compare_picture(mine: Path, theirs: Path, out: Path) -> Path:
    """The two runs' training loss, step by step, on one picture (`gpt-viz compare MINE THEIRS --metric loss`)."""
    import gpt_viz  # its pictures import matplotlib: only when drawing

    figure = gpt_viz.compare_runs([mine, theirs], "loss", labels=["yours", "gpt-core's"])
    ax = figure.axes[0]
    yours, gpt_core = ax.get_lines()[:2]
    yours.set(linewidth=4.0, alpha=0.5)  # wide and pale beneath gpt-core's dashes: two curves that agree stay visible
    gpt_core.set(linestyle="--")
    ax.legend()
    ax.set_title(f"{TASK}: training loss, yours and gpt-core's (same seed, same batches)")
    return gpt_viz.save_figure(figure, out)[0]


class LearnersGPT(nn.Module):
    """The learner's GPT computing on `model`'s parameters, called as gpt-core's is: (idx, targets, read=...) ->
    GPTOutput, `read` the rows of the logits the caller scores."""

    def __init__(self, model: GPT, model_class: type[nn.Module]):
        super().__init__()
        c = model.config
        parts = c.bias and c.layernorm and c.residual and c.mlp and c.tie_weights and c.dropout == 0
        plain = parts and c.pos == "learned" and not c.randomized_positions and c.max_positions in (0, c.block_size)
        if not plain:
            raise TrainError(f"{TASK}'s model is not the plain GPT your model step builds (learned positions, biases, "
                             "LayerNorm, residuals, the MLP, a tied head, no dropout)")  # fmt: skip
        self.config = c
        self.learner = model_class(c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, model.kernels)
        _share_parameters(self.learner, model)

    def forward(self, idx: Tensor, targets: Tensor | None = None, *, read: Tensor | None = None,
                **unused: Any) -> GPTOutput:  # fmt: skip
        if any(value is not None for value in unused.values()):
            raise TrainError(f"your GPT takes no {', '.join(unused)}: learn train calls it with idx and targets alone")
        logits, loss = self.learner(idx, targets)
        return GPTOutput(logits if read is None else logits[read], loss)


def _share_parameters(learner: nn.Module, model: GPT) -> None:
    """`model`'s parameters put into `learner` by name, the same tensors: a step of either moves both."""
    theirs = dict(model.named_parameters(remove_duplicate=False))
    mine = dict(learner.named_parameters(remove_duplicate=False))
    if set(mine) != set(theirs):
        raise TrainError(f"your GPT's parameters are not gpt-core's: {sorted(set(mine) ^ set(theirs))[0]}")
    for name in mine:
        owner, _, attribute = name.rpartition(".")
        setattr(learner.get_submodule(owner), attribute, theirs[name])
    learner.to(model.wte.weight.device)  # anything else it holds (a buffer) beside the parameters


class CourseTrainer(Trainer):
    """gpt-train's Trainer, computing with the learner's GPT (when given), a line to `report` at each evaluation."""

    def __init__(self, run: Run, quiet: bool, report: Callable[[str], None], model_class: type[nn.Module] | None):
        self._report, self._model_class = report, model_class
        self._began = time.monotonic()
        self.learners: LearnersGPT | None = None
        super().__init__(run, quiet)

    def _training_forward(self) -> nn.Module:
        if self._model_class is None:
            return super()._training_forward()
        self.learners = LearnersGPT(self.model, self._model_class)
        return self.learners

    def scored_model(self) -> Any:
        return self.model if self.learners is None else self.learners

    def evaluate(self, limit: int | None) -> dict[str, float]:
        s = self.settings
        head = f"  step {self.step:,} of {s.steps:,}: loss {format_loss(math.nan if self.loss is None else self.loss)}"
        final = self.step >= s.steps
        if final:
            self._report(f"{head}; scoring every held-out example")
        metrics = super().evaluate(limit)
        seconds = time.monotonic() - self._began
        if METRIC in metrics and EXAMPLES in metrics:
            score, examples = metrics[METRIC], int(metrics[EXAMPLES])
            if final:
                wrong = round((1.0 - score) * examples)
                self._report(f"  held-out exact match {score:.5f} on {examples:,} examples ({wrong:,} wrong), "
                             f"trained and scored in {seconds:.0f} s")  # fmt: skip
            else:
                self._report(f"{head}, held-out exact match {score:.4f} on {examples:,} examples ({seconds:.0f} s)")
        return metrics


@contextlib.contextmanager
def _importable(folder: Path, modules: list[str]) -> Iterator[None]:
    """The learner's folder first on sys.path, and the step modules imported afresh from it."""
    for name in modules:
        sys.modules.pop(name, None)
    sys.path.insert(0, str(folder.resolve()))
    try:
        yield
    finally:
        sys.path.remove(str(folder.resolve()))
