"""score_examples: the teacher-forced loop modadd and shakespeare share."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gpt_core import IGNORE_INDEX, GPTOutput
from gpt_tasks import Batch, score_examples
from gpt_tasks.scoring import reporting_progress

V = 5


class Constant(nn.Module):
    """Logits that always favour token 0 by `margin` over the other V - 1 tokens."""

    def __init__(self, margin: float):
        super().__init__()
        self.margin = margin

    def forward(self, idx, read=None):
        logits = torch.zeros(*idx.shape, V)
        logits[..., 0] = self.margin
        return GPTOutput(logits if read is None else logits[read], None)


def make_batch(ids: torch.Tensor) -> Batch:
    """Example i: two inputs, targets (IGNORE, i % 2): scored once, right for a token-0 model when i is even."""
    inputs = torch.stack((ids, ids), dim=1) % V
    targets = torch.full_like(inputs, IGNORE_INDEX)
    targets[:, 1] = ids % 2
    return Batch(inputs, targets)


@pytest.mark.parametrize("chunk_size", [1, 3, 100])
def test_loss_and_accuracy_count_only_scored_targets_whatever_the_chunking(chunk_size):
    model = Constant(margin=math.log(4.0)).train()
    scores = score_examples(model, torch.arange(10), make_batch, "cpu", chunk_size)
    # p(0) = 4 / (4 + 4) = 1/2, p(1) = 1/8: half the examples cost log 2, the other half log 8.
    assert scores.loss == pytest.approx((math.log(2) + math.log(8)) / 2, rel=1e-6)
    assert scores.accuracy == 0.5 and scores.examples == 10
    assert model.training  # the mode is restored


def test_scoring_runs_without_gradients():
    seen = []

    class Spy(Constant):
        def forward(self, idx, read=None):
            seen.append((torch.is_grad_enabled(), self.training))
            return super().forward(idx, read)

    score_examples(Spy(1.0), torch.arange(4), make_batch, "cpu", 2)
    assert seen == [(False, False), (False, False)]


def test_examples_that_score_different_numbers_of_targets_weigh_each_target_alike():
    """Example i scores i + 1 targets, all right for a token-0 model: the loss is the mean over targets."""

    def uneven(ids: torch.Tensor) -> Batch:
        inputs = torch.zeros(len(ids), 4, dtype=torch.long)
        targets = torch.full_like(inputs, IGNORE_INDEX)
        for row, i in enumerate(ids.tolist()):
            targets[row, : i + 1] = 0 if i < 3 else 1  # examples 0-2 right (6 targets), example 3 wrong (4)
        return Batch(inputs, targets)

    scores = score_examples(Constant(margin=math.log(4.0)), torch.arange(4), uneven, "cpu", chunk_size=2)
    assert scores.targets == 10 and scores.examples == 4
    assert scores.loss == pytest.approx((6 * math.log(2) + 4 * math.log(8)) / 10, rel=1e-6)
    assert scores.accuracy == pytest.approx(0.6)


def test_an_evaluation_reports_its_progress_within_reporting_progress_and_only_there():
    reports = []
    with reporting_progress(lambda split, done, total: reports.append((split, done, total))):
        score_examples(Constant(1.0), torch.arange(5), make_batch, "cpu", 2, "heldout")
    score_examples(Constant(1.0), torch.arange(5), make_batch, "cpu", 2, "heldout")
    assert reports == [("heldout", 0, 5), ("heldout", 2, 5), ("heldout", 4, 5), ("heldout", 5, 5)]
