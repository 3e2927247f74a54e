"""Teacher-forced scoring, the evaluation loop of every task scored by its loss on the true next tokens; and
`in_chunks`, how an evaluation walks its examples, telling `reporting_progress`'s `report` how far it has got."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from gpt_core import GPT, IGNORE_INDEX, cross_entropy, to_device
from gpt_tasks.task import Batch, evaluating

Report = Callable[[str, int, int], None]  # report(split, examples done, examples in all)

_report: ContextVar[Report] = ContextVar("gpt_tasks_evaluation_report", default=lambda split, done, total: None)


@contextmanager
def reporting_progress(report: Report) -> Iterator[None]:
    token = _report.set(report)
    try:
        yield
    finally:
        _report.reset(token)


def in_chunks(examples: torch.Tensor, size: int, split: str) -> Iterator[torch.Tensor]:
    """`examples` (N, ...) `size` at a time, reporting the start and each chunk done."""
    report, done = _report.get(), 0
    report(split, 0, len(examples))
    for chunk in examples.split(size):
        yield chunk
        done += len(chunk)
        report(split, done, len(examples))


@dataclass(frozen=True)
class Scores:
    """The mean cross-entropy (nats) and argmax accuracy over every scored target, and how many were scored."""

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
    """Score `model` on `examples` (N, ...), each chunk made a Batch by `make_batch`; every scored target weighs
    alike, and the head runs only at them. The scored positions are found on the host and each chunk's numbers stay
    on the device until the end: two reads of a GPU per split, not several per chunk."""
    losses, hits, counts = [], [], []
    with evaluating(model):
        for chunk in in_chunks(examples, chunk_size, split):
            batch = make_batch(chunk)
            read = batch.targets != IGNORE_INDEX  # (n, T), on the host
            logits = model(to_device(batch.inputs, torch.device(device)), read=read).logits.float()  # (scored, V)
            targets = to_device(batch.targets[read], logits.device)  # (scored,)
            losses.append(cross_entropy(logits, targets))
            hits.append((logits.argmax(dim=-1) == targets).sum())
            counts.append(len(targets))
    total_loss = sum(loss * count for loss, count in zip(torch.stack(losses).tolist(), counts, strict=True))
    scored, correct = sum(counts), int(torch.stack(hits).sum())
    return Scores(loss=total_loss / scored, accuracy=correct / scored, examples=len(examples), targets=scored)
