"""The task contract: what a task must tell the trainer, and nothing about how training works.

A task is its vocabulary and its data: its tokens, its examples and their split, how to draw a
training batch, and how to score a model. It talks to the model only through gpt_core's public
interface: calling the model on token ids (forward) and `gpt_core.generate`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
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
    """Base class of every task. Subclasses set the class attributes and implement the methods.

    The vocabulary is `self.vocab`, set in __init__ (a `gpt_tasks.CharVocab` for a task whose tokens are
    characters): `vocab_size`, `encode`, `decode` and `token_labels` come from it. A task whose tokens are
    not one character each (words, a trained tokenizer) overrides those four instead.

    Class attributes:
        name: the registry name (`gpt-train run --task NAME`).
        description: one line for `gpt-train tasks`.
        Params: a frozen dataclass of the task's parameters, with defaults; validated in __post_init__.
        primary_metric: the metric shown in progress bars and pictures (a key of `evaluate`'s dict).
        higher_is_better: whether a larger primary metric is better.
        eval_splits: the splits evaluated during training, of "train" and "heldout" (the names a run keys its
            metrics by, gpt_viz.SPLITS).
    """

    name: ClassVar[str]
    description: ClassVar[str] = ""
    Params: ClassVar[type]
    primary_metric: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    eval_splits: ClassVar[tuple[str, ...]] = ("heldout",)

    vocab: CharVocab

    def __init__(self, params: Any):
        self.params = params

    # vocabulary -----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        """Number of distinct token ids."""
        return len(self.vocab)

    @property
    @abstractmethod
    def block_size(self) -> int:
        """Length of the model's input sequences."""

    def encode(self, text: str) -> list[int]:
        """Text to token ids; raises ValueError on a character outside the vocabulary."""
        return self.vocab.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids to text."""
        return self.vocab.decode(ids)

    def token_labels(self, ids: Sequence[int]) -> list[str]:
        """One printable label per token, for the tick labels of attention pictures."""
        return [self.decode([i]) for i in ids]

    # data and scoring ------------------------------------------------------------------------
    @abstractmethod
    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """A training batch drawn with `generator`; it never contains a held-out example."""

    @abstractmethod
    def evaluate(
        self, model: GPT, split: str, device: torch.device | str, limit: int | None = None
    ) -> dict[str, float]:
        """Named metrics of `model` on `split` ("train" or "heldout"): the whole split when
        `limit` is None, else a fixed sample of `limit` examples."""

    @abstractmethod
    def defaults(self) -> Defaults:
        """The model of a good CPU run of this task with these parameters, and the training settings in which
        that run differs from the trainer's defaults."""

    def model_config(self, **shape: Any) -> GPTConfig:
        """A GPTConfig with vocab_size and block_size from this task and the rest from `shape`
        (n_layer, n_head, ...): the task fixes those two, so no defaults() block restates them."""
        return GPTConfig(vocab_size=self.vocab_size, block_size=self.block_size, **shape)

    def files(self) -> dict[str, bytes]:
        """Files this task needs to be rebuilt exactly that its parameters cannot hold inline (a trained
        tokenizer), by the name of the parameter that points at each. A trainer keeps each beside the run
        and, when it rebuilds the task, sets that parameter to the kept file's path. Default: none."""
        return {}

    # probes (optional) -----------------------------------------------------------------------
    def probe_batch(self) -> Batch | None:
        """The fixed held-out examples whose activations `probes` reads; None (the default) when the probes
        read the weights alone."""
        return None

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        """Named scalars about how `model` computes, logged at every evaluation beside the metrics (see
        gpt_tasks.probes). `cache` holds every hook point of `model` on `probe_batch()` (None when that is
        None). Names follow the metric names' grammar. Default: none, and nothing is run."""
        return {}

    @abstractmethod
    def example_prompts(self) -> list[str]:
        """A few prompts for sampling from a trained model."""

    @abstractmethod
    def attention_examples(self, n: int) -> list[str]:
        """At most `n` held-out examples (each as text, at most block_size tokens) whose attention a run keeps
        for its pictures and explorer page, in a fixed order, so that every run shows the same ones; the first
        is the one a single picture draws."""


class evaluating:
    """Context manager: put a model in eval mode with gradients off, and restore its mode after."""

    def __init__(self, model: GPT):
        self.model = model

    def __enter__(self) -> GPT:
        self.was_training = self.model.training
        self.no_grad = torch.no_grad()
        self.no_grad.__enter__()
        self.model.eval()
        return self.model

    def __exit__(self, *exc: object) -> None:
        self.model.train(self.was_training)
        self.no_grad.__exit__(*exc)
