"""addition: read two `digits`-digit numbers a and b (example a * 10^digits + b), then write their sum, zero-padded
and by default least significant digit first ("123+456=9750"), the order in which a carry is computed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT
from gpt_tasks.params import check_between, check_fraction
from gpt_tasks.probes import ProbeCache
from gpt_tasks.prompt_answer import PromptAnswerTask
from gpt_tasks.splits import IndexedSplit
from gpt_tasks.symbols import CharVocab, as_bytes, digits_of, one_digit_changes
from gpt_tasks.task import Defaults

ALPHABET = "0123456789+="
PLUS, EQUALS = ALPHABET.index("+"), ALPHABET.index("=")
MAX_DIGITS = 9  # 10^(2 * digits) pairs must be numbered in int64


@dataclass(frozen=True)
class AdditionParams:
    digits: int = 3
    reverse: bool = True
    heldout_fraction: float = 0.1

    def __post_init__(self) -> None:
        check_between("digits", self.digits, 1, MAX_DIGITS)
        check_fraction("heldout_fraction", self.heldout_fraction)


class AdditionTask(PromptAnswerTask):
    name = "addition"
    description = "add two n-digit numbers, sum written least-significant digit first (exact match of generation)"
    Params = AdditionParams
    primary_metric = "exact_match"
    token_metric = "digit_accuracy"
    eval_fixed = ("heldout_fraction", "reverse")  # reverse decides what each answer position means
    vocab = CharVocab(ALPHABET)

    def __init__(self, params: AdditionParams):
        super().__init__(params)
        encode = lambda ids: as_bytes(digits_of(ids, 2 * params.digits, 10))
        self.split = IndexedSplit(10 ** (2 * params.digits), encode, params.heldout_fraction, salt=b"addition")

    @property
    def prompt_length(self) -> int:  # up to and including "="
        return 2 * self.params.digits + 2

    @property
    def answer_length(self) -> int:
        return self.params.digits + 1

    def prompt_note(self, ids: Sequence[int]) -> str:
        """What `gpt-train sample` and the explorer say when `ids` is not `digits` digits, "+", `digits` digits, "="
        ('' when it is): a prompt of the right length in another shape ("++++++++") is answered too."""
        d, ids = self.params.digits, [int(i) for i in ids]
        digit = lambda part: all(0 <= i < 10 for i in part)
        if len(ids) == 2 * d + 2 and digit(ids[:d]) and ids[d] == PLUS and digit(ids[d + 1 : -1]) and ids[-1] == EQUALS:
            return ""
        return (
            f"addition trains on prompts of two {d}-digit numbers, '+' between and '=' after, like "
            f"{self.example_prompts()[0]!r}, and this one is {self.decode(ids)!r}: the model never learned to answer it"
        )

    def single_token_corruptions(self, ids: torch.Tensor) -> torch.Tensor:
        return one_digit_changes(ids, 2 * self.params.digits, 10)

    def answer_position_names(self) -> list[str]:
        """Named by place value whatever the order: digit_0 is always the units digit."""
        places = [f"digit_{place}" for place in range(self.answer_length)]
        return places if self.params.reverse else places[::-1]

    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """Pair numbers (N,) -> token ids of "a+b=sum" (N, 3 * digits + 3)."""
        d = self.params.digits
        operands = digits_of(ids, 2 * d, 10)  # (N, 2d): a's digits then b's
        total = ids // 10**d + ids % 10**d
        answer = digits_of(total, d + 1, 10)  # most significant first
        if self.params.reverse:
            answer = answer.flip(1)
        plus = torch.full((len(ids), 1), PLUS, dtype=torch.long, device=ids.device)
        equals = torch.full((len(ids), 1), EQUALS, dtype=torch.long, device=ids.device)
        return torch.cat((operands[:, :d], plus, operands[:, d:], equals, answer), dim=1)

    def carries(self, inputs: Tensor) -> Tensor:
        """Whether a carry comes into each answer digit, from the operands in `inputs`: (N, answer_length)."""
        d = self.params.digits
        a, b = inputs[:, :d].flip(1), inputs[:, d + 1 : 2 * d + 1].flip(1)  # (N, d), units first
        carry = torch.zeros(len(inputs), dtype=torch.bool, device=inputs.device)
        into = [carry]
        for place in range(d):
            carry = a[:, place] + b[:, place] + carry.long() >= 10
            into.append(carry)
        by_place = torch.stack(into, dim=1)  # (N, d + 1), units first
        return by_place if self.params.reverse else by_place.flip(1)

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        """Teacher-forced accuracy on the answer digits with and without a carry into them (learnt last); a kind
        absent from the probe batch is left out."""
        queries = self.answer_queries()
        predicted = cache["logits"][:, queries].argmax(dim=-1)  # (N, answer)
        right = predicted == cache.batch.targets[:, queries]
        carried = self.carries(cache.batch.inputs)
        kinds = {"carry_digit_accuracy": right[carried], "no_carry_digit_accuracy": right[~carried]}
        return {name: float(hits.float().mean()) for name, hits in kinds.items() if hits.numel()}

    def defaults(self) -> Defaults:
        return Defaults(
            model=self.model_config(n_layer=2, n_head=4, n_embd=64),
            train={"batch_size": 128, "lr": 3e-3, "min_lr": 3e-4},
        )
