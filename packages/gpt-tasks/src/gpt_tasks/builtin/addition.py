"""addition: read two `digits`-digit numbers, then write their sum.

An example is its operand pair (a, b), numbered a * 10^digits + b. Its text is the operands
zero-padded to `digits`, then the sum zero-padded to digits + 1 and, by default, written least
significant digit first ("123+456=9750" is 123 + 456 = 579), the order in which a carry can be
computed left to right. The model sees the sequence minus its last token and is scored only on
the sum. Exact match is measured by greedy generation with the KV cache, over the whole
held-out split when the example space can be listed (3 digits: 10^6 pairs), else over a fixed
sample of 20,000 held-out pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpt_core import GPT, IGNORE_INDEX, generate
from gpt_tasks.builtin.sort import as_bytes, digits_of
from gpt_tasks.splits import IndexedSplit
from gpt_tasks.symbols import CharVocab
from gpt_tasks.task import Batch, Task, TrainDefaults, evaluating

EVAL_BATCH = 4096  # as for sort

ALPHABET = "0123456789+="
PLUS, EQUALS = ALPHABET.index("+"), ALPHABET.index("=")
MAX_DIGITS = 9  # 10^(2 * digits) pairs must be numbered in int64


@dataclass(frozen=True)
class AdditionParams:
    digits: int = 3
    reverse: bool = True
    heldout_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= MAX_DIGITS:
            raise ValueError(f"digits must be between 1 and {MAX_DIGITS}, got {self.digits}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")


class AdditionTask(Task):
    name = "addition"
    description = "add two n-digit numbers, sum written least-significant digit first (exact match by generation)"
    Params = AdditionParams
    primary_metric = "exact_match"

    def __init__(self, params: AdditionParams):
        super().__init__(params)
        self.vocab = CharVocab(ALPHABET)
        # The canonical bytes of a pair: one byte per operand digit, a's then b's, most significant first.
        self.split = IndexedSplit(
            size=10 ** (2 * params.digits),
            encode=lambda ids: as_bytes(digits_of(ids, 2 * params.digits, 10)),
            fraction=params.heldout_fraction,
            salt=b"addition",
        )

    @property
    def vocab_size(self) -> int:
        return len(ALPHABET)

    @property
    def block_size(self) -> int:
        return 3 * self.params.digits + 2  # a + b = sum, minus the last token

    @property
    def prompt_length(self) -> int:
        """Tokens up to and including "=": the part generation starts from."""
        return 2 * self.params.digits + 2

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """Pair numbers (N,) -> token ids of "a+b=sum" (N, 3 * digits + 3)."""
        d = self.params.digits
        operands = digits_of(ids, 2 * d, 10)  # (N, 2d): a's digits then b's
        total = ids // 10**d + ids % 10**d
        answer = digits_of(total, d + 1, 10)  # most significant first
        if self.params.reverse:
            answer = answer.flip(1)
        plus = torch.full((len(ids), 1), PLUS, dtype=torch.long)
        equals = torch.full((len(ids), 1), EQUALS, dtype=torch.long)
        return torch.cat((operands[:, :d], plus, operands[:, d:], equals, answer), dim=1)

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        seq = self.sequences(self.split.sample("train", batch_size, generator))
        targets = seq[:, 1:].clone()
        targets[:, : self.prompt_length - 1] = IGNORE_INDEX  # only the sum is scored
        return Batch(seq[:, :-1], targets)

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        if model.config.pos == "learned" and self.block_size > model.config.block_size:
            raise ValueError(
                f"learned positions cannot go past their table: {self.params.digits}-digit addition needs "
                f"{self.block_size} positions, the model has {model.config.block_size}"
            )
        # limit None: every pair of the split, or SAMPLED_EVALUATION (20,000) when it cannot be listed.
        ids = self.split.evaluation_ids(split, limit)
        n_out = self.params.digits + 1
        start = self.prompt_length
        correct = torch.zeros(n_out, dtype=torch.long)
        exact = 0
        with evaluating(model):
            for chunk in ids.split(EVAL_BATCH):
                seq = self.sequences(chunk).to(device)
                out = generate(model, seq[:, :start], max_new_tokens=n_out, temperature=0.0)
                hits = out[:, start:] == seq[:, start:]  # (N, digits + 1)
                exact += int(hits.all(dim=1).sum())
                correct += hits.sum(dim=0).cpu()
        n = len(ids)
        if not self.params.reverse:
            correct = correct.flip(0)  # index by place value: 0 is the units digit
        metrics = {"exact_match": exact / n, "digit_accuracy": float(correct.sum()) / (n * n_out), "examples": float(n)}
        metrics |= {f"digit_{place}_accuracy": float(c) / n for place, c in enumerate(correct)}
        return metrics

    def defaults(self) -> TrainDefaults:
        return TrainDefaults(
            model={"n_layer": 2, "n_head": 4, "n_embd": 64, "dropout": 0.0, "pos": "learned"},
            steps=2000,
            batch_size=128,
            lr=3e-3,
            min_lr=3e-4,
            warmup_steps=100,
            weight_decay=0.1,
            eval_every=250,
            eval_limit=2000,
        )

    def example_prompts(self) -> list[str]:
        ids = self.split.evaluation_ids("heldout", 3, seed=1)
        return [self.decode(row.tolist()) for row in self.sequences(ids)[:, : self.prompt_length]]

    def attention_example(self) -> str:
        ids = self.split.evaluation_ids("heldout", 1, seed=1)
        return self.decode(self.sequences(ids)[0, :-1].tolist())
