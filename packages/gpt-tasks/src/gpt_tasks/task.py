"""The task contract: what a task must tell the trainer, and nothing about how training works.

A task is its vocabulary and its data: its tokens (`self.vocab`), its examples and their split, how to draw a
training batch, and how to score a model. It talks to the model only through gpt_core's public interface:
calling the model on token ids (forward) and `gpt_core.generate`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gpt_core import GPT, GPTConfig
from gpt_tasks.symbols import CharVocab

if TYPE_CHECKING:
    from gpt_tasks.probes import ProbeCache


@dataclass(frozen=True)
class Batch:
    """inputs and targets (B, T) of token ids; targets hold IGNORE_INDEX where nothing is scored."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device, non_blocking=True), self.targets.to(device, non_blocking=True))


@dataclass(frozen=True)
class Defaults:
    """What `gpt-train run --task NAME` uses when the user sets nothing: the model, and the training settings
    in which a good CPU run of the task differs from the trainer's own defaults, by name (`{"lr": 3e-3}`).
    The trainer owns the training settings and checks each name and value (gpt-train's TrainSettings)."""

    model: GPTConfig
    train: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """Base class of every task; the README's "The task contract" says what each member means."""

    name: ClassVar[str]  # the registry name, as in `gpt-train run --task NAME`
    description: ClassVar[str] = ""  # one line for `gpt-train tasks`
    Params: ClassVar[type]  # a frozen dataclass of the parameters, with defaults, validated in __post_init__
    primary_metric: ClassVar[str]  # a key of `evaluate`'s dict, shown in progress bars and pictures
    higher_is_better: ClassVar[bool] = True
    eval_splits: ClassVar[tuple[str, ...]] = ("heldout",)  # of "train" and "heldout"

    vocab: CharVocab
    """The tokens, set in __init__ (or a property): a CharVocab, or any object with its len, encode, decode and
    token_labels. The four vocabulary members below come from it."""

    def __init__(self, params: Any):
        self.params = params

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Text to token ids; a ValueError names anything outside the vocabulary."""
        return self.vocab.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.vocab.decode(ids)

    def token_labels(self, ids: Sequence[int]) -> list[str]:
        """One printable label per token, for the tick labels of attention pictures."""
        return self.vocab.token_labels(ids)

    @property
    @abstractmethod
    def block_size(self) -> int:
        """Length of the model's input sequences."""

    @abstractmethod
    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """A training batch drawn with `generator`; it never contains a held-out example."""

    @abstractmethod
    def evaluate(
        self, model: GPT, split: str, device: torch.device | str, limit: int | None = None
    ) -> dict[str, float]:
        """Named metrics of `model` on `split` ("train" or "heldout"): the whole split when `limit` is None, else
        a fixed sample of `limit` examples."""

    @abstractmethod
    def defaults(self) -> Defaults:
        """The model of a good CPU run of this task, and the training settings in which it differs from the
        trainer's defaults."""

    def model_config(self, **shape: Any) -> GPTConfig:
        """A GPTConfig with vocab_size and block_size from this task and the rest (n_layer, ...) from `shape`."""
        return GPTConfig(vocab_size=self.vocab_size, block_size=self.block_size, **shape)

    def files(self) -> dict[str, bytes]:
        """Files the task needs to be rebuilt exactly that its parameters cannot hold inline (a trained
        tokenizer), by the name of the parameter that points at each. Default: none."""
        return {}

    def probe_batch(self) -> Batch | None:
        """The fixed held-out examples whose activations `probes` reads; None when they read the weights alone."""
        return None

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        """Named scalars about how `model` computes (gpt_tasks.probes), from `cache`: every hook point of `model`
        on `probe_batch()`. Default: none, and nothing is run."""
        return {}

    @abstractmethod
    def example_prompts(self) -> list[str]:
        """A few prompts for sampling from a trained model."""

    @abstractmethod
    def attention_examples(self, n: int) -> list[str]:
        """At most `n` held-out examples (text of at most block_size tokens) whose attention a run keeps for its
        pictures, in a fixed order so that every run shows the same ones; the first is the one a picture draws."""


@contextmanager
def evaluating(model: GPT) -> Iterator[GPT]:
    """Put a model in eval mode with gradients off, and restore its mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
