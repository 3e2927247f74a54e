"""The task step's answer: `shift`, each digit of the prompt plus one, modulo 10."""

from dataclasses import dataclass

import torch

from gpt_tasks import DIGITS, CharVocab, Defaults, IndexedSplit, PromptAnswerTask, as_bytes, digits_of


@dataclass(frozen=True)
class Params:
    length: int = 4
    heldout_fraction: float = 0.25


class ShiftTask(PromptAnswerTask):
    name = "shift"
    description = "add one to each digit, modulo 10"
    Params = Params
    primary_metric = "exact_match"

    def __init__(self, params: Params):
        super().__init__(params)
        self.vocab = CharVocab(DIGITS[:10])
        self.split = IndexedSplit(
            size=10**params.length,
            encode=lambda ids: as_bytes(digits_of(ids, params.length, 10)),
            fraction=params.heldout_fraction,
            salt=b"shift",
        )

    @property
    def prompt_length(self) -> int:
        return self.params.length

    @property
    def answer_length(self) -> int:
        return self.params.length

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """The digits, then each plus one modulo 10: (N, 2 * length)."""
        digits = digits_of(ids, self.params.length, 10)  # (N, length)
        return torch.cat((digits, (digits + 1) % 10), dim=1)

    def defaults(self) -> Defaults:
        return Defaults(model=self.model_config(n_layer=2, n_head=2, n_embd=32), train={"lr": 3e-3})
