"""The task contract: a task's vocabulary and data, its batches and how to score a model, and nothing about how
training works (the README's "The task contract" says what each member means)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gpt_core import GPT, GPTConfig, to_device
from gpt_tasks.symbols import CharVocab

if TYPE_CHECKING:
    from gpt_tasks.probes import ProbeCache


@dataclass(frozen=True)
class Batch:
    """inputs and targets (B, T) of token ids; targets hold IGNORE_INDEX where nothing is scored."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        """On `device`: to a CUDA GPU through pinned memory, queued behind the GPU's work (`gpt_core.to_device`);
        elsewhere as the caller waits (an asynchronous copy from freed memory gives MPS garbage ids)."""
        device = torch.device(device)
        return Batch(to_device(self.inputs, device), to_device(self.targets, device))


@dataclass(frozen=True)
class Defaults:
    """The model of a good CPU run of the task, and the training settings (by name) in which it differs from the
    trainer's own defaults; gpt-train's TrainSettings checks each."""

    model: GPTConfig
    train: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """Base class of every task."""

    name: ClassVar[str]  # the registry name, as in `gpt-train run --task NAME`
    description: ClassVar[str] = ""  # one line for `gpt-train tasks`
    Params: ClassVar[type]  # a frozen dataclass of the parameters, with defaults, validated in __post_init__
    primary_metric: ClassVar[str]  # a key of `evaluate`'s dict, shown in progress bars and pictures
    higher_is_better: ClassVar[bool] = True
    eval_splits: ClassVar[tuple[str, ...]] = ("heldout",)  # of "train" and "heldout"
    eval_fixed: ClassVar[tuple[str, ...]] = ("heldout_fraction",)  # Params a trained model's evaluation keeps
    per_example_metrics: ClassVar[tuple[str, ...]] = ()  # metrics that are the share of examples right, counted

    vocab: CharVocab  # set in __init__ (or a property); any object with len, encode, decode and token_labels

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
        return self.vocab.token_labels(ids)

    @property
    @abstractmethod
    def block_size(self) -> int: ...

    @abstractmethod
    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """A training batch drawn with `generator`, never holding a held-out example."""

    @abstractmethod
    def evaluate(
        self, model: GPT, split: str, device: torch.device | str, limit: int | None = None
    ) -> dict[str, float]:
        """Named metrics of `model` on `split`: all of it when `limit` is None, else a fixed sample of `limit`."""

    def check_evaluation(self, model: GPT, split: str, limit: int | None) -> None:
        """ValueError for what `evaluate` cannot score: a split other than train and heldout, a limit below 1 (-1
        scored all but one example), a model with fewer token ids than the task."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be None (the whole split) or a whole number >= 1, got {limit!r}")
        ids = getattr(getattr(model, "config", None), "vocab_size", self.vocab_size)  # a stand-in model may have none
        if ids < self.vocab_size:
            raise ValueError(f"the model has {ids:,} token ids and the {self.name} task {self.vocab_size:,}")

    @abstractmethod
    def defaults(self) -> Defaults: ...

    def model_config(self, **shape: Any) -> GPTConfig:
        """A GPTConfig with this task's vocab_size and block_size, the rest (n_layer, ...) from `shape`."""
        return GPTConfig(vocab_size=self.vocab_size, block_size=self.block_size, **shape)

    def files(self) -> dict[str, bytes]:
        """Files that rebuilding the task needs (a trained tokenizer), by the parameter that points at each."""
        return {}

    def probe_batch(self) -> Batch | None:
        """The fixed held-out examples `probes` reads; None when they read the weights alone."""
        return None

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        """Named scalars about how `model` computes, from every hook point on `probe_batch()` (gpt_tasks.probes)."""
        return {}

    @abstractmethod
    def example_prompts(self) -> list[str]: ...

    @abstractmethod
    def attention_examples(self, n: int) -> list[str]:
        """At most `n` held-out examples of at most block_size tokens, in a fixed order (a picture draws the first)."""


@contextmanager
def evaluating(model: GPT) -> Iterator[GPT]:
    """Eval mode with gradients off, the model's mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
