"""modadd: read [a, b, =], answer (a + b) mod p; trained full batch on `train_fraction` of the pairs, held-out
accuracy jumps long after training accuracy, and the network that generalises adds with a few Fourier frequencies of
its number embedding: the grokking task of Power et al. (2022) and Nanda et al. (2023)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpt_core import GPT
from gpt_tasks.params import check_between, check_fraction
from gpt_tasks.probes import ProbeCache
from gpt_tasks.prompt_answer import answer_batch
from gpt_tasks.scoring import score_examples
from gpt_tasks.splits import MAX_ENUMERATED, IndexedSplit
from gpt_tasks.symbols import checked_ids
from gpt_tasks.task import Batch, Defaults, Task

EVAL_BATCH = 4096
MAX_P = int(MAX_ENUMERATED**0.5)  # every one of the p^2 pairs is listed: 1414
EQUALS_TEXT = "="
TOP_FREQUENCIES = 5
FOURIER_SHARE = f"fourier_top{TOP_FREQUENCIES}_share"  # the number embedding's Fourier power in its top 5


@dataclass(frozen=True)
class ModAddParams:
    p: int = 113
    train_fraction: float = 0.2

    def __post_init__(self) -> None:
        check_between("p", self.p, 2, MAX_P, why=" (all p*p pairs are listed)")
        check_fraction("train_fraction", self.train_fraction)


class Numbers:
    """The numbers 0 .. p-1, then "=" (token p), written with spaces between them."""

    def __init__(self, p: int):
        self.p = p

    def __len__(self) -> int:
        return self.p + 1

    def encode(self, text: str) -> list[int]:
        words = text.split()
        for word in words:
            if word != EQUALS_TEXT and not (word.isascii() and word.isdigit() and int(word) < self.p):
                raise ValueError(
                    f"token {word!r} is not in the vocabulary (numbers 0..{self.p - 1} and '=', separated by spaces)"
                )
        return [self.p if word == EQUALS_TEXT else int(word) for word in words]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.token_labels(ids))

    def token_labels(self, ids: Sequence[int]) -> list[str]:
        return [EQUALS_TEXT if i == self.p else str(i) for i in checked_ids(ids, self.p + 1)]


def pair_bytes(a: torch.Tensor, b: torch.Tensor) -> list[bytes]:
    rows = np.stack((a.numpy(), b.numpy()), axis=1).astype(">u2")
    return [row.tobytes() for row in rows]


def fourier_spectrum(embedding: torch.Tensor) -> torch.Tensor:
    """Power of an embedding of the numbers 0..p-1 (p, d) at each frequency k = 0 .. p // 2, the DFT over the
    numbers summed over dimensions. k and p - k are the same real wave, so their power is one entry; k = 0 is the
    mean vector. The entries add up to p times the embedding's squared norm (Parseval)."""
    p = embedding.shape[0]
    power = torch.fft.rfft(embedding.detach().cpu().double(), dim=0).abs().square().sum(dim=1)  # (p // 2 + 1,)
    k = torch.arange(len(power), device=power.device)
    return torch.where((k > 0) & (2 * k < p), 2 * power, power)


def top_frequency_share(spectrum: torch.Tensor, top: int = TOP_FREQUENCIES) -> float:
    """The share of the power at k >= 1 in the `top` strongest frequencies: top / (p // 2) for a random embedding,
    near 1 once a few frequencies carry the numbers."""
    waves = spectrum[1:]
    return float(waves.topk(min(top, len(waves))).values.sum() / waves.sum())


class ModAddTask(Task):
    name = "modadd"
    description = "a + b mod p on a fraction of the pairs, full batch: the grokking task (accuracy)"
    Params = ModAddParams
    primary_metric = "accuracy"
    per_example_metrics = ("accuracy",)  # one answer token a pair
    eval_splits = ("train", "heldout")
    eval_fixed = ("train_fraction",)

    def __init__(self, params: ModAddParams):
        super().__init__(params)
        p = params.p
        self.vocab = Numbers(p)
        self.equals = p  # the token id of "="
        encode = lambda ids: pair_bytes(ids // p, ids % p)
        self.split = IndexedSplit(p * p, encode, fraction=1.0 - params.train_fraction, salt=b"modadd")

    @property
    def block_size(self) -> int:
        return 3

    def examples(self, ids: torch.Tensor) -> Batch:
        """Pair numbers (N,) -> inputs [a, b, =] (N, 3), scored at "=" on c = (a + b) mod p."""
        p = self.params.p
        a, b = ids // p, ids % p
        return answer_batch(torch.stack((a, b, torch.full_like(a, self.equals), (a + b) % p), dim=1), prompt_length=3)

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """The whole training set (in a fixed order) when batch_size covers it, else a sample without replacement."""
        ids = self.split.ids("train")
        if batch_size < len(ids):
            ids = ids[torch.randperm(len(ids), generator=generator, device="cpu")[:batch_size]]
        return self.examples(ids)

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        """Accuracy and loss at "=". `fourier_top5_share`, a property of the weights, not of a split, is a probe."""
        self.check_evaluation(model, split, limit)
        ids = self.split.evaluation_ids(split, limit)
        scores = score_examples(model, ids, self.examples, device, EVAL_BATCH, split)
        metrics = {"accuracy": scores.accuracy, "loss": scores.loss, "examples": float(len(ids))}
        return metrics

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        return {FOURIER_SHARE: top_frequency_share(fourier_spectrum(model.wte.weight[: self.params.p]))}

    def defaults(self) -> Defaults:
        """Nanda et al.'s recipe at half their width, 8x GPT-2's initial weights, and the rate dropped tenfold once
        held-out accuracy reaches 0.99; the README's modadd section says why each setting."""
        return Defaults(
            model=self.model_config(n_layer=1, n_head=4, n_embd=64, tie_weights=False, layernorm=False, init_scale=8.0),
            train={
                "steps": 10000,  # the most: the run ends 600 steps after the cooldown starts
                "batch_size": self.split.count("train"),  # full batch
                "lr": 1.2e-2,
                "warmup_steps": 10,
                "schedule": "constant",
                "min_lr": 1.2e-3,
                "cooldown_steps": 600,  # at min_lr, from the first evaluation with held-out accuracy >= 0.99 ...
                "cooldown_trigger": 0.99,  # ... to the end of the run
                "weight_decay": 1.0,
                "beta2": 0.98,
                "grad_clip": 0.0,
                "eval_every": 20,  # often enough to see the jump's shape
                "eval_limit": self.params.p**2,  # every pair of the split
            },
        )

    def example_prompts(self) -> list[str]:
        return self.attention_examples(3)

    def prompt_note(self, ids: Sequence[int]) -> str:
        """What `gpt-train sample` and the explorer say when `ids` is not two numbers then "=" ('' when it is)."""
        numbers = [int(i) for i in ids[:2]]
        if len(ids) == 3 and all(0 <= n < self.params.p for n in numbers) and int(ids[2]) == self.equals:
            return ""
        return (
            f"modadd trains on prompts of two numbers then '=', like {self.example_prompts()[0]!r}, and this one is "
            f"{self.decode(ids)!r}: the model never learned to answer it"
        )

    def attention_examples(self, n: int) -> list[str]:
        inputs = self.examples(self.split.evaluation_ids("heldout", n, seed=1)).inputs
        return [self.decode(row.tolist()) for row in inputs]
