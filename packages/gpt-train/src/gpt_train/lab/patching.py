"""Activation patching: which activation, at which position, carries what the answer depends on. A clean and a
corrupted prompt differ in one token, so their answers first differ at one position, where the logit difference (clean
token minus corrupted token) flips sign; copying one layer's activation at one position from the clean run into the
corrupted one, the share of that difference that comes back is how much passes through there."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT, HookFn
from gpt_tasks import PromptAnswerTask, Task, evaluating
from gpt_train.lab.common import (
    InspectError,
    Record,
    block_points,
    check_index,
    position_ids,
    prompt_answer_task,
    seeded,
)
from gpt_viz import HELDOUT

HEAD_POINTS = frozenset({"q", "k", "v", "z", "pattern"})  # shaped (B, H, T, ...): position is dimension 2, not 1
CANDIDATES = 8  # clean examples drawn per pair wanted: most have a single-token corruption of the kind asked for

MIN_DIFFERENCE = 0.01
"""The least |clean - corrupted| logit difference patching apportions: its answer's odds move by about 1%."""


@dataclass(frozen=True)
class Patching(Record):
    """restored[layer][position]: the share of the logit difference that patching `point` there brings back (0: none,
    1: all); `to_json` is inspect_patch_<point>.json."""

    point: str
    examples: int
    corrupted_position: int
    answer_position: int
    positions: list[str]
    clean_difference: float
    corrupted_difference: float
    restored: list[list[float]]
    example: dict[str, str]
    split: str = HELDOUT


@dataclass(frozen=True)
class Pairs:
    """Clean and corrupted sequences (N, T) differing at prompt position `corrupted_position` alone, whose answers
    first differ at `answer_position`."""

    clean: Tensor
    corrupted: Tensor
    corrupted_position: int
    answer_position: int


def first_difference(a: Tensor, b: Tensor) -> Tensor:
    """The first index where rows of a and b (..., n) differ; n where they are equal: (...,)."""
    differs = a != b
    return torch.where(differs.any(dim=-1), differs.int().argmax(dim=-1), a.shape[-1])


def corrupted_pairs(
    task: PromptAnswerTask, examples: int, corrupted_position: int, answer_position: int | None
) -> Pairs:
    """Up to `examples` of the task's fixed held-out examples, each with one corruption of prompt token
    `corrupted_position` whose answer first differs at `answer_position` (None: where they most often do)."""
    check_index("corrupted position", corrupted_position, task.prompt_length, "prompts have {} tokens")
    if answer_position is not None:
        check_index("answer position", answer_position, task.answer_length, "answers have {} tokens")
    ids = task.split.evaluation_ids(HELDOUT, examples * CANDIDATES)
    variants = task.single_token_corruptions(ids)  # (N, V) example numbers
    if variants is None:
        raise InspectError(
            f"patch needs prompts that differ in one token, and task {task.name!r} does not say how to make them "
            "(PromptAnswerTask.single_token_corruptions)"
        )
    clean = task.sequences(ids)  # (N, T)
    corrupted = task.sequences(variants.flatten()).view(*variants.shape, -1)  # (N, V, T)
    p = task.prompt_length
    one_change = (clean[:, None, :p] != corrupted[..., :p]).sum(dim=-1) == 1  # (N, V): what a task promised
    changed = first_difference(clean[:, None, :p], corrupted[..., :p])  # (N, V): the one changed prompt token
    first = first_difference(clean[:, None, p:], corrupted[..., p:])  # (N, V): first changed answer token
    usable = one_change & (changed == corrupted_position) & (first < task.answer_length)
    if not usable.any():
        raise InspectError(
            f"no single-token change of prompt position {corrupted_position} changes the answer; "
            "choose another --corrupt"
        )
    if answer_position is None:
        answer_position = int(first[usable].mode().values)
    usable &= first == answer_position
    has_pair = usable.any(dim=1)
    if not has_pair.any():
        raise InspectError(
            f"no single-token change of prompt position {corrupted_position} first changes the answer at "
            f"position {answer_position}; try another --corrupt or --answer-position"
        )
    choice = usable.int().argmax(dim=1)  # each clean example's first usable variant
    rows = has_pair.nonzero().squeeze(1)[:examples]
    return Pairs(clean[rows], corrupted[rows, choice[rows]], corrupted_position, answer_position)


def logit_difference(logits: Tensor, clean_token: Tensor, corrupted_token: Tensor) -> float:
    """Mean over examples of logit(clean answer token) - logit(corrupted answer token) at the last position."""
    last = logits[:, -1]  # (N, V)
    picked = [last.gather(1, token[:, None]).cpu().double() for token in (clean_token, corrupted_token)]  # (N, 1)
    return float((picked[0] - picked[1]).mean())  # on the CPU: MPS has no float64


def check_restorable(clean: float, corrupted: float) -> None:
    """Refuse, before anything is written, a model whose clean - corrupted difference is not finite or under
    MIN_DIFFERENCE: there is no share of it to restore, or its shares are its rounding's."""
    if not math.isfinite(clean) or not math.isfinite(corrupted):
        raise InspectError(
            f"the model's logit differences are not finite (clean {clean}, corrupted {corrupted}): its weights "
            "hold NaN or inf, so there is nothing to patch"
        )
    if clean == corrupted:
        raise InspectError(
            f"the model's logit difference is {clean:.3g} on clean and corrupted inputs alike: its answer does not "
            "depend on the corrupted token, so there is nothing to restore"
        )
    if abs(clean - corrupted) < MIN_DIFFERENCE:
        raise InspectError(
            f"the model's logit difference is {clean:.3g} clean and {corrupted:.3g} corrupted, under "
            f"{MIN_DIFFERENCE} apart: its answer barely depends on the corrupted token, so the shares restored "
            "would be noise (a model that has learned the task, or another --corrupt, may show one)"
        )


def patch(
    task: Task,
    model: GPT,
    device: torch.device,
    point: str,
    examples: int,
    corrupted_position: int = 0,
    answer_position: int | None = None,
) -> Patching:
    """Patch `point` of each layer at each position up to the answer's query position, clean into corrupted."""
    task = prompt_answer_task(task, "patch")
    names = block_points(model, point)
    pairs = corrupted_pairs(task, examples, corrupted_position, answer_position)
    query = task.prompt_length - 1 + pairs.answer_position  # the input position that writes the answer token
    clean, corrupted = pairs.clean.to(device), pairs.corrupted.to(device)
    clean_token, corrupted_token = clean[:, query + 1], corrupted[:, query + 1]
    clean_in, corrupted_in = clean[:, : query + 1], corrupted[:, : query + 1]
    # a randomized model's ids for the whole input, as evaluation draws them, cut to what is read: the same for both
    drawn = position_ids(model, len(clean), clean.shape[1] - 1, seeded())
    positions = None if drawn is None else drawn[:, : query + 1]
    dim = 2 if point in HEAD_POINTS else 1
    with evaluating(model):
        clean_logits, cache = model.run_with_cache(clean_in, names=names, positions=positions)
        corrupted_logits = model(corrupted_in, positions=positions).logits
        clean_diff = logit_difference(clean_logits, clean_token, corrupted_token)
        corrupted_diff = logit_difference(corrupted_logits, clean_token, corrupted_token)
        check_restorable(clean_diff, corrupted_diff)
        restored = []
        for name in names:
            row = []
            for position in range(query + 1):
                with model.hooks({name: copy_position(cache[name], position, dim)}):
                    patched = model(corrupted_in, positions=positions).logits
                    patched = logit_difference(patched, clean_token, corrupted_token)
                row.append((patched - corrupted_diff) / (clean_diff - corrupted_diff))
            restored.append(row)
    first = pairs.clean[0], pairs.corrupted[0]
    labels = [f"prompt {i}" for i in range(task.prompt_length)] + [f"answer {i}" for i in range(task.answer_length)]
    return Patching(
        point=point,
        examples=len(pairs.clean),
        corrupted_position=pairs.corrupted_position,
        answer_position=pairs.answer_position,
        positions=labels[: query + 1],
        clean_difference=clean_diff,
        corrupted_difference=corrupted_diff,
        restored=restored,
        example={"clean": task.decode(first[0].tolist()), "corrupted": task.decode(first[1].tolist())},
    )


def copy_position(source: Tensor, position: int, dim: int) -> HookFn:
    """A hook that replaces the activation at `position` (along `dim`) with `source`'s."""

    def replace(activation: Tensor, name: str) -> Tensor:
        patched = activation.clone()
        patched.select(dim, position).copy_(source.select(dim, position))
        return patched

    return replace
