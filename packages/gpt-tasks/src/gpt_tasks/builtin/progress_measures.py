"""Grokking's progress measures (Nanda et al. 2023, section 5), for a model trained on modadd.

The generalising network's logit of each answer c at "=", as a function of the pair (a, b), lies in the span of
cos and sin of w_k (a + b) for a few key frequencies k (w_k = 2 pi k / p). The *restricted* logits keep only those
directions: their held-out loss falls as the Fourier circuit forms. The *excluded* logits are the rest: their
training loss rises as the training set comes to be fitted through the circuit. With the weight norm, they split
training into memorisation, circuit formation and cleanup. Only the p number logits are projected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT
from gpt_tasks.builtin.modadd import EVAL_BATCH, ModAddTask, fourier_spectrum
from gpt_tasks.task import evaluating

KEY_SHARE = 0.05  # of the embedding's power at k >= 1: a random one holds 1 / 56 per frequency at p = 113


def key_frequencies(embedding: Tensor, share: float = KEY_SHARE) -> list[int]:
    """The frequencies k >= 1 holding at least `share` of the embedding's (p, d) power at k >= 1, in order."""
    waves = fourier_spectrum(embedding)[1:]
    return [k + 1 for k in range(len(waves)) if waves[k] >= share * waves.sum()]


def sum_waves(p: int, frequencies: Sequence[int]) -> Tensor:
    """(p * p, 2 * len(frequencies)) float64: for each k, the unit vectors cos(w_k (a + b)) and sin(w_k (a + b))
    over the pairs a * p + b, orthonormal; sin vanishes at k = p / 2 (an even p) and is dropped there."""
    ids = torch.arange(p * p, dtype=torch.float64, device="cpu")
    total = ids.div(p, rounding_mode="floor") + ids.remainder(p)  # a + b
    columns = []
    for k in frequencies:
        angle = 2 * math.pi * k * total / p
        columns += [wave for wave in (torch.cos(angle), torch.sin(angle)) if wave.norm() > 1e-6 * p]
    basis = torch.stack(columns, dim=1) if columns else torch.zeros(p * p, 0, dtype=torch.float64, device="cpu")
    return basis / basis.norm(dim=0).clamp_min(1e-300)


def key_part(numbers: Tensor, p: int, frequencies: Sequence[int]) -> Tensor:
    """The component of number logits (p * p, p) along the key frequencies' directions."""
    basis = sum_waves(p, frequencies).to(numbers)
    return basis @ (basis.T @ numbers)


def restricted_logits(logits: Tensor, p: int, frequencies: Sequence[int]) -> Tensor:
    """The logits (p * p, vocab) with their number part reduced to its mean plus its key-frequency component."""
    numbers = logits[:, :p]
    return torch.cat((numbers.mean(dim=0, keepdim=True) + key_part(numbers, p, frequencies), logits[:, p:]), dim=1)


def excluded_logits(logits: Tensor, p: int, frequencies: Sequence[int]) -> Tensor:
    """The logits (p * p, vocab) with the key-frequency component of their number part removed."""
    numbers = logits[:, :p]
    return torch.cat((numbers - key_part(numbers, p, frequencies), logits[:, p:]), dim=1)


def pair_logits(model: GPT, task: ModAddTask, device: torch.device | str = "cpu") -> Tensor:
    """(p * p, vocab) float64: the model's logits at "=" for every pair, in pair-id order (a * p + b)."""
    ids = torch.arange(task.params.p**2, device="cpu")
    rows = []
    with evaluating(model):
        for chunk in ids.split(EVAL_BATCH):
            inputs = task.examples(chunk).inputs.to(device)
            rows.append(model(inputs).logits[:, -1].cpu().double())
    return torch.cat(rows)


def pair_answers(p: int, ids: Tensor) -> Tensor:
    return (ids.div(p, rounding_mode="floor") + ids.remainder(p)) % p


def answer_loss(logits: Tensor, p: int, ids: Tensor) -> float:
    """Mean cross-entropy of the logits (p * p, vocab) at the pairs `ids`."""
    log_probs = torch.log_softmax(logits[ids], dim=-1)
    return float(-log_probs.gather(1, pair_answers(p, ids)[:, None]).mean())


def answer_accuracy(logits: Tensor, p: int, ids: Tensor) -> float:
    return float((logits[ids].argmax(dim=-1) == pair_answers(p, ids)).double().mean())


def weight_norm(model: torch.nn.Module) -> float:
    return float(torch.sqrt(sum(p.detach().cpu().double().square().sum() for p in model.parameters())))


@dataclass(frozen=True)
class ProgressMeasures:
    """The measures of one model, given the key frequencies of the trained one, and its accuracy and loss on each
    split, which bound the phases."""

    train_accuracy: float
    heldout_accuracy: float
    train_loss: float
    heldout_loss: float
    restricted_loss: float  # held-out pairs, key directions only
    excluded_loss: float  # training pairs, key directions removed
    weight_norm: float

    @classmethod
    def of(cls, model: GPT, task: ModAddTask, frequencies: Sequence[int], device="cpu") -> ProgressMeasures:
        p = task.params.p
        logits = pair_logits(model, task, device)
        train, heldout = task.split.ids("train"), task.split.ids("heldout")
        return cls(
            train_accuracy=answer_accuracy(logits, p, train),
            heldout_accuracy=answer_accuracy(logits, p, heldout),
            train_loss=answer_loss(logits, p, train),
            heldout_loss=answer_loss(logits, p, heldout),
            restricted_loss=answer_loss(restricted_logits(logits, p, frequencies), p, heldout),
            excluded_loss=answer_loss(excluded_logits(logits, p, frequencies), p, train),
            weight_norm=weight_norm(model),
        )
