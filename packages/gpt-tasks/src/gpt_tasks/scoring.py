"""Teacher-forced scoring: the evaluation loop of every task that scores a model by its loss on the true next
tokens rather than by generating (modadd, text, a plugin's language model). Only how examples become batches
differs between them, and that is the task's `make_batch`.

`in_chunks` is how an evaluation walks its examples; within `reporting_progress(report)` it tells `report`
how far it has got, which is how a trainer shows the progress of a long final evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from gpt_core import GPT, IGNORE_INDEX, cross_entropy
from gpt_tasks.task import Batch, evaluating

Report = Callable[[str, int, int], None]
"""report(split, examples done, examples in all), called as an evaluation starts and after each chunk."""

_report: ContextVar[Report] = ContextVar("gpt_tasks_evaluation_report", default=lambda split, done, total: None)


@contextmanager
def reporting_progress(report: Report) -> Iterator[None]:
    token = _report.set(report)
    try:
        yield
    finally:
        _report.reset(token)


def in_chunks(examples: torch.Tensor, size: int, split: str) -> Iterator[torch.Tensor]:
    """`examples` (N, ...) `size` at a time, reporting the start (0 done) and each chunk done."""
    report, done = _report.get(), 0
    report(split, 0, len(examples))
    for chunk in examples.split(size):
        yield chunk
        done += len(chunk)
        report(split, done, len(examples))


@dataclass(frozen=True)
class Scores:
    """loss: the mean cross-entropy over every scored target (nats per scored token); accuracy: the share of
    scored targets that are the model's most likely token; and how many examples and targets were scored."""

    loss: float
    accuracy: float
    examples: int
    targets: int


def score_examples(
    model: GPT,
    examples: torch.Tensor,
    make_batch: Callable[[torch.Tensor], Batch],
    device: torch.device | str,
    chunk_size: int,
    split: str = "",
) -> Scores:
    """Score `model` on `examples` (N, ...), `chunk_size` at a time, each chunk made into a Batch by
    `make_batch`. Examples may score different numbers of targets: the loss weighs every scored target alike.
    The head runs only at the scored positions (`GPT.forward`'s `read`)."""
    total_loss, correct, scored = 0.0, 0, 0
    with evaluating(model):
        for chunk in in_chunks(examples, chunk_size, split):
            batch = make_batch(chunk).to(device)
            read = batch.targets != IGNORE_INDEX  # (n, T)
            logits = model(batch.inputs, read=read).logits.float()  # (scored, V)
            targets = batch.targets[read]  # (scored,)
            total_loss += float(cross_entropy(logits, targets)) * len(targets)
            correct += int((logits.argmax(dim=-1) == targets).sum())
            scored += len(targets)
    return Scores(loss=total_loss / scored, accuracy=correct / scored, examples=len(examples), targets=scored)
