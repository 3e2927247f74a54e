"""reverse: read `length` digits, then write them in reverse order.

Built only on gpt-tasks' public interface, as any third-party task would be. It subclasses
PromptAnswerTask, which supplies training batches (scored on the answer only), exact-match
evaluation (greedy generation's exact match, computed in one teacher-forced forward pass: every
answer token the argmax given the true prefix), example prompts and the attention examples; the
task itself says what its tokens are (`self.vocab`, from which the base class derives vocab_size,
encode, decode and token_labels) and how its examples are numbered and split. An example is its run of digits,
numbered 0 .. 10^length - 1: the run is the prompt, its reverse the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpt_tasks import (
    DIGITS,
    CharVocab,
    Defaults,
    IndexedSplit,
    PromptAnswerTask,
    as_bytes,
    digits_of,
    one_digit_changes,
)


@dataclass(frozen=True)
class ReverseParams:
    """The task's parameters. `gpt-train run --task reverse --set length=4` sets them from strings;
    gpt-tasks coerces each value to the annotated type, and the checks below turn a bad value
    into a ParamError that names it."""

    length: int = 5
    heldout_fraction: float = 0.25

    def __post_init__(self) -> None:
        if not 2 <= self.length <= 12:
            raise ValueError(f"length must be between 2 and 12, got {self.length}")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")


class ReverseTask(PromptAnswerTask):
    name = "reverse"
    description = "reverse a run of digits (third-party plugin example; exact match by greedy generation)"
    Params = ReverseParams
    primary_metric = "exact_match"

    def __init__(self, params: ReverseParams):
        super().__init__(params)
        self.vocab = CharVocab(DIGITS[:10])
        # The split hashes one byte per digit with a salt of our own, so the held-out runs are
        # the same on every machine and in every process.
        self.split = IndexedSplit(
            size=10**params.length,
            encode=lambda ids: as_bytes(self.digits(ids)),
            fraction=params.heldout_fraction,
            salt=b"reverse",
        )

    @property
    def prompt_length(self) -> int:
        return self.params.length

    @property
    def answer_length(self) -> int:
        return self.params.length

    def digits(self, ids: torch.Tensor) -> torch.Tensor:
        """Example numbers (N,) -> their digits, most significant first (N, length)."""
        return digits_of(ids, self.params.length, 10)

    def single_token_corruptions(self, ids: torch.Tensor) -> torch.Tensor:
        """Optional (activation patching): every run that differs from each of `ids` in one digit, a prompt
        that differs in one token."""
        return one_digit_changes(ids, self.params.length, 10)

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """The run followed by its reverse (N, 2 * length)."""
        digits = self.digits(ids)
        return torch.cat((digits, digits.flip(1)), dim=1)

    def defaults(self) -> Defaults:
        return Defaults(
            model=self.model_config(n_layer=2, n_head=2, n_embd=32),
            train={"steps": 400, "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 20, "eval_every": 100, "eval_limit": 1000},
        )
