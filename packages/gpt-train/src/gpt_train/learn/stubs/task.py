"""Step 14: a task of your own, as a gpt-tasks plugin would define it.

A PromptAnswerTask numbers its examples 0 .. size-1 and says how a number becomes tokens: prompt_length
tokens of question, then answer_length of answer. The model is trained on the answer only and scored by
exact match of greedy generation on the held-out side of a hash split (IndexedSplit: blake2b of each
example's bytes, so the same examples are held out on every machine). Its tokens are `self.vocab`, the
ten digits: the base class derives vocab_size, encode and decode from it. This one, as written, copies its
digits: change `sequences` to make it your own (reverse them, add one to each modulo 10, count the nines ...).

Check it with `gpt-train learn check task`: it registers the class, trains a small model briefly and
scores it on the held-out split.
"""

from dataclasses import dataclass

import torch

from gpt_tasks import DIGITS, CharVocab, Defaults, IndexedSplit, PromptAnswerTask, as_bytes, digits_of


@dataclass(frozen=True)
class Params:
    length: int = 4
    heldout_fraction: float = 0.25


class MyTask(PromptAnswerTask):
    name = "my-task"
    description = "my own task"
    Params = Params
    primary_metric = "exact_match"

    def __init__(self, params: Params):
        super().__init__(params)
        self.vocab = CharVocab(DIGITS[:10])
        self.split = IndexedSplit(
            size=10**params.length,
            encode=lambda ids: as_bytes(digits_of(ids, params.length, 10)),
            fraction=params.heldout_fraction,
            salt=b"my-task",
        )

    @property
    def prompt_length(self) -> int:
        return self.params.length

    @property
    def answer_length(self) -> int:
        return self.params.length

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """Example numbers (N,) -> prompt then answer, (N, prompt_length + answer_length).

        Hint: digits = digits_of(ids, self.params.length, 10) is (N, length); return
        torch.cat((digits, answer), dim=1) with your answer (N, answer_length) built from them.
        """
        raise NotImplementedError

    def defaults(self) -> Defaults:
        return Defaults(model=self.model_config(n_layer=2, n_head=2, n_embd=32), train={"lr": 3e-3})
