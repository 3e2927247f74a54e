"""repeats: block_size + 1 random tokens whose last `length` (block_size // 4 .. block_size // 2) copy the segment
at a random earlier start. The copy's tokens after its first can be predicted only by finding the current token's
earlier occurrence and copying what came after it: what an induction head does (Olsson et al. 2022)."""

from __future__ import annotations

import string
from dataclasses import dataclass

import torch

from gpt_core import GPT, IGNORE_INDEX
from gpt_tasks.params import check_between, check_fraction
from gpt_tasks.probes import PROBE_EXAMPLES, ProbeCache, induction_probes
from gpt_tasks.scoring import score_examples
from gpt_tasks.splits import check_samplable, heldout_mask
from gpt_tasks.symbols import CharVocab, as_bytes
from gpt_tasks.task import Batch, Defaults, Task

SYMBOLS = string.ascii_letters + string.digits  # token i is written as SYMBOLS[i]
EVAL_EXAMPLES = 4096  # a fixed sample of each split, drawn once
EVAL_BATCH = 512
SEEDS = {"train": 0, "heldout": 1}  # of the fixed samples


@dataclass(frozen=True)
class RepeatsParams:
    vocab: int = 62
    block_size: int = 32
    heldout_fraction: float = 0.1

    def __post_init__(self) -> None:
        check_between("vocab", self.vocab, 2, len(SYMBOLS))
        if self.block_size < 8:
            raise ValueError(f"block_size must be at least 8, got {self.block_size}")
        check_fraction("heldout_fraction", self.heldout_fraction)
        check_samplable(self.heldout_fraction, "random sequences")


@dataclass(frozen=True)
class Sequences:
    """tokens (N, block_size + 1) and where each sequence's copy starts (N,)."""

    tokens: torch.Tensor
    copy_starts: torch.Tensor

    def __getitem__(self, rows: torch.Tensor | slice) -> Sequences:
        return Sequences(self.tokens[rows], self.copy_starts[rows])

    def __len__(self) -> int:
        return len(self.tokens)


class RepeatsTask(Task):
    name = "repeats"
    description = "random tokens with a repeated segment: only in-context copying predicts (induction heads)"
    Params = RepeatsParams
    primary_metric = "copy_accuracy"

    def __init__(self, params: RepeatsParams):
        super().__init__(params)
        self.vocab = CharVocab(SYMBOLS[: params.vocab])
        self._fixed: dict[str, Sequences] = {}

    @property
    def block_size(self) -> int:
        return self.params.block_size

    def draw(self, n: int, generator: torch.Generator) -> Sequences:
        T = self.block_size
        tokens = torch.randint(self.params.vocab, (n, T + 1), generator=generator, device="cpu")
        length = torch.randint(T // 4, T // 2 + 1, (n,), generator=generator, device="cpu")
        copy_start = T + 1 - length
        starts = copy_start - length + 1  # places the segment can start at: it ends before the copy
        source = (torch.rand(n, generator=generator, device="cpu") * starts).long()
        at = torch.arange(T + 1, device=tokens.device).expand(n, -1)
        read = torch.where(at >= copy_start[:, None], at - copy_start[:, None] + source[:, None], at)
        return Sequences(tokens.gather(1, read), copy_start)

    def heldout(self, sequences: Sequences) -> torch.Tensor:
        return heldout_mask(as_bytes(sequences.tokens), self.params.heldout_fraction, b"repeats")

    def sample(self, split: str, n: int, generator: torch.Generator) -> Sequences:
        """n sequences of `split`, drawn and kept when their hash puts them there."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be train or heldout, got {split!r}")
        kept: list[Sequences] = []
        while sum(map(len, kept)) < n:
            candidates = self.draw(2 * n, generator)
            mask = self.heldout(candidates)
            kept.append(candidates[mask if split == "heldout" else ~mask])
        return Sequences(torch.cat([s.tokens for s in kept])[:n], torch.cat([s.copy_starts for s in kept])[:n])

    def fixed(self, split: str) -> Sequences:
        if split not in self._fixed:
            self._fixed[split] = self.sample(split, EVAL_EXAMPLES, torch.Generator().manual_seed(SEEDS[split]))
        return self._fixed[split]

    def examples(self, sequences: Sequences, copyable_only: bool = False) -> Batch:
        """Inputs and next-token targets; with `copyable_only`, only the targets after the copy's first token."""
        inputs, targets = sequences.tokens[:, :-1], sequences.tokens[:, 1:].clone()
        if copyable_only:
            positions = torch.arange(1, self.block_size + 1, device=targets.device)
            targets[positions <= sequences.copy_starts[:, None]] = IGNORE_INDEX
        return Batch(inputs, targets)

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        return self.examples(self.sample("train", batch_size, generator))

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        self.check_evaluation(model, split, limit)
        sequences = self.fixed(split)[:limit]
        rows = torch.arange(len(sequences), device="cpu")
        copy = score_examples(model, rows, lambda r: self.examples(sequences[r], True), device, EVAL_BATCH, split)
        every = score_examples(model, rows, lambda r: self.examples(sequences[r]), device, EVAL_BATCH, split)
        metrics = {"copy_accuracy": copy.accuracy, "copy_loss": copy.loss, "loss": every.loss}
        return metrics | {"examples": float(len(rows))}

    def probe_batch(self) -> Batch:
        return self.examples(self.fixed("heldout")[:PROBE_EXAMPLES])

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        return induction_probes(model, cache)

    def defaults(self) -> Defaults:
        return Defaults(
            model=self.model_config(n_layer=2, n_head=2, n_embd=64, mlp=False, pos="rope"),
            train=dict(steps=1000, lr=3e-3, weight_decay=0.0, eval_every=25, eval_limit=512, warmup_steps=50),
        )

    def example_prompts(self) -> list[str]:
        first = self.fixed("heldout")[:1]
        return [self.decode(first.tokens[0, : int(first.copy_starts[0]) + 2].tolist())]

    def attention_examples(self, n: int) -> list[str]:
        return [self.decode(row[: self.block_size].tolist()) for row in self.fixed("heldout").tokens[:n]]
