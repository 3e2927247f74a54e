"""What every analysis of a trained model needs: its error and checks of what the user asked for."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from gpt_core import GPT, block_hook
from gpt_tasks import PromptAnswerTask, Task
from gpt_train.errors import TrainError


class InspectError(TrainError):
    """An analysis that cannot be run as asked: a hook, layer or head the model lacks, or a task of the wrong shape."""


class Record:
    """A dataclass whose fields, as they are, are its JSON record."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_index(name: str, value: int, count: int, holder: str) -> None:
    """Refuse `value` unless it is one of `count`: "head 5 is out of range: each layer has 2 heads (0..1)"."""
    if not 0 <= value < count:
        raise InspectError(f"{name} {value} is out of range: {holder.format(count)} (0..{count - 1})")


def block_points(model: GPT, point: str) -> list[str]:
    """The hook name of `point` (resid_pre, attn_out, ...) in every block, refusing a point blocks lack."""
    names = [block_hook(layer, point) for layer in range(model.config.n_layer)]
    if names[0] not in model.hook_names():
        points = sorted({name.split(".")[-1] for name in model.hook_names() if name.startswith("blocks.0.")})
        raise InspectError(f"unknown hook name {point!r}; each block's are: {', '.join(points)}")
    return names


def prompt_answer_task(task: Task, analysis: str) -> PromptAnswerTask:
    """`task`, if its examples are a prompt and an answer (what `analysis` reads); else a one-line refusal."""
    if not isinstance(task, PromptAnswerTask):
        raise InspectError(
            f"{analysis} needs a prompt-answer task (sort, addition, ...); {task.name!r} examples are not a "
            "prompt followed by an answer"
        )
    return task


def position_ids(model: GPT, n: int, length: int, generator: torch.Generator) -> torch.Tensor | None:
    """A randomized-position model's ids for n sequences of `length` tokens, drawn as its evaluation draws them (None
    for any other model: positions 0..length-1). Read without them, such a model sees positions it never trained at.
    An analysis seeds `generator` once, so it reads the same positions at every run."""
    return model.sample_positions(n, length, generator) if model.config.randomized_positions else None


def seeded() -> torch.Generator:
    """The generator an analysis draws position ids from: seeded as the task's evaluation seeds its own."""
    return torch.Generator().manual_seed(0)
