"""sort: read `length` symbols, then write them in sorted order. For length generalisation, `separator` puts "="
after the input, so the model sees where it ends, and `min_length` draws each training batch at one length from
min_length .. length, each length split by its own hash, so a run's held-out side never depends on the mix."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT, block_hook
from gpt_tasks.params import check_between, check_fraction
from gpt_tasks.probes import ProbeCache
from gpt_tasks.prompt_answer import PromptAnswerTask, answer_batch
from gpt_tasks.splits import IndexedSplit
from gpt_tasks.symbols import DIGITS, CharVocab, as_bytes, digits_of, one_digit_changes
from gpt_tasks.task import Batch, Defaults

SEPARATOR = "="


@dataclass(frozen=True)
class SortParams:
    length: int = 6
    vocab: int = 10
    heldout_fraction: float = 0.25
    separator: bool = False
    min_length: int | None = None

    def __post_init__(self) -> None:
        if self.length < 2:
            raise ValueError(f"length must be at least 2, got {self.length}")
        check_between("vocab", self.vocab, 2, len(DIGITS))
        check_fraction("heldout_fraction", self.heldout_fraction)
        if self.length >= 62 or self.vocab**self.length >= 2**62:  # vocab >= 2: no huge power is computed
            raise ValueError(
                f"vocab ** length must stay below 2**62 (int64 example numbers), got {self.vocab}**{self.length}"
            )
        if self.min_length is not None and not 1 <= self.min_length <= self.length:
            raise ValueError(f"min_length must be between 1 and length ({self.length}), got {self.min_length}")
        if len(self.lengths) > 1 and not self.separator:
            raise ValueError(
                "min_length below length needs separator=true: without it nothing marks where a shorter input ends"
            )

    @property
    def lengths(self) -> range:  # that training batches are drawn at
        return range(self.length if self.min_length is None else self.min_length, self.length + 1)


class SortTask(PromptAnswerTask):
    name = "sort"
    description = "sort a run of digits (seed task; exact match of greedy generation)"
    Params = SortParams
    primary_metric = "exact_match"
    eval_fixed = ("heldout_fraction", "vocab", "separator")  # vocab 9 with the separator is 10 ids, as vocab 10

    def __init__(self, params: SortParams):
        super().__init__(params)
        self.vocab = CharVocab(DIGITS[: params.vocab] + (SEPARATOR if params.separator else ""))
        self.splits = {length: self.split_at(length) for length in params.lengths}  # each checked here, once
        self.split = self.splits[params.length]

    def split_at(self, length: int) -> IndexedSplit:
        """The split of the runs of `length` symbols, by their symbols alone (whatever the separator or the mix)."""
        encode = lambda ids: as_bytes(self.digits(ids, length))
        needed = ("train", "heldout") if length == self.params.length else ("train",)  # shorter: trained on alone
        try:
            return IndexedSplit(self.params.vocab**length, encode, self.params.heldout_fraction, b"sort", needed)
        except ValueError as error:
            raise ValueError(f"at length {length}, {error}") from None

    @property
    def prompt_length(self) -> int:
        return self.prompt_length_at(self.params.length)

    def prompt_length_at(self, length: int) -> int:
        return length + self.params.separator

    @property
    def answer_length(self) -> int:
        return self.params.length

    @property
    def prompt_lengths(self) -> tuple[int, ...]:
        return tuple(self.prompt_length_at(length) for length in self.params.lengths)

    def answer_length_for(self, prompt_length: int) -> int:
        return max(1, prompt_length - self.params.separator)

    def digits(self, ids: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Run numbers (N,) -> their symbols (N, length), at the task's length unless told."""
        return digits_of(ids, self.params.length if length is None else length, self.params.vocab)

    def single_token_corruptions(self, ids: torch.Tensor) -> torch.Tensor:
        return one_digit_changes(ids, self.params.length, self.params.vocab)

    def sequences(self, ids: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Input, the separator if any, then the sorted order, at `length`."""
        digits = self.digits(ids, length)
        parts = [digits, digits.sort(dim=1).values]
        if self.params.separator:
            parts.insert(1, torch.full((len(ids), 1), self.vocab.index[SEPARATOR], device=ids.device))
        return torch.cat(parts, dim=1)

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Training sequences at one length drawn from `lengths` (no draw when there is one)."""
        lengths = self.params.lengths
        if len(lengths) == 1:
            return super().batch(batch_size, generator)
        length = lengths[int(torch.randint(len(lengths), (1,), generator=generator, device="cpu"))]
        ids = self.splits[length].sample("train", batch_size, generator)
        return answer_batch(self.sequences(ids, length), self.prompt_length_at(length))

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        """`source_attention`: at each answer position, the share of attention that the head attending most there
        puts on the input digit(s) it must write, averaged over answer positions (1 for one that reads it alone)."""
        return {"source_attention": float(source_attention(self, model, cache).flatten(0, 1).amax(dim=0).mean())}

    def defaults(self) -> Defaults:
        # Evaluating every 25 steps to step 250 shows the task being learnt (the README has the figures).
        return Defaults(
            model=self.model_config(n_layer=2, n_head=4, n_embd=64),
            train={"steps": 1200, "batch_size": 128, "lr": 3e-3, "early_eval_every": 25, "early_eval_until": 250},
        )


def source_attention(task: SortTask, model: GPT, cache: ProbeCache) -> Tensor:
    """The attention weight each head puts on the input positions holding each answer digit's value, averaged over
    the probe batch: (n_layer, n_head, answer_length)."""
    queries = task.answer_queries()
    inputs, targets = cache.batch.inputs, cache.batch.targets
    digits = inputs[:, : task.params.length]  # (N, length)
    answer = targets[:, queries]  # (N, answer): answer digit i is written from query position queries[i]
    is_source = (answer[:, :, None] == digits[:, None, :]).to(inputs.device)  # (N, answer, length)
    per_layer = []
    for layer in range(model.config.n_layer):
        pattern = cache[block_hook(layer, "pattern")][:, :, queries, : task.params.length]  # (N, H, answer, length)
        per_layer.append((pattern * is_source[:, None]).sum(dim=-1).mean(dim=0))  # (H, answer)
    return torch.stack(per_layer)
