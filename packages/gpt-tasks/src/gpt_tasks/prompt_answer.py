"""The shape most algorithmic tasks share: a numbered example is a prompt then a fixed-length answer, scored on the
answer. Exact match needs no generation: greedy decoding reads the true prefix up to its first wrong token, so the
answer is right exactly when every teacher-forced argmax equals its target (test_prompt_answer.py checks it)."""

from __future__ import annotations

from abc import abstractmethod

import torch

from gpt_core import GPT, IGNORE_INDEX
from gpt_tasks.probes import PROBE_EXAMPLES
from gpt_tasks.scoring import in_chunks
from gpt_tasks.splits import IndexedSplit
from gpt_tasks.task import Batch, Task, evaluating

EVAL_BATCH = 512  # sequences per forward pass: enough to hide per-call overhead, few enough to stay in cache


class PromptAnswerTask(Task):
    """Base for tasks whose examples are `prompt_length` tokens of question and `answer_length` of answer."""

    split: IndexedSplit
    token_metric = "token_accuracy"
    per_example_metrics = ("exact_match",)  # the token metric is a share of answer tokens

    @property
    @abstractmethod
    def prompt_length(self) -> int: ...

    @property
    @abstractmethod
    def answer_length(self) -> int: ...

    @abstractmethod
    def sequences(self, ids: torch.Tensor) -> torch.Tensor:
        """Example numbers (N,) -> prompt followed by answer, (N, prompt_length + answer_length)."""

    @property
    def prompt_lengths(self) -> tuple[int, ...]:
        """The prompt lengths training draws (`gpt-train sample` notes a prompt of another length)."""
        return (self.prompt_length,)

    def answer_length_for(self, prompt_length: int) -> int:
        return self.answer_length

    def answer_position_names(self) -> list[str]:
        """Metric name of each answer position, in generation order."""
        return [f"position_{i}" for i in range(self.answer_length)]

    @property
    def block_size(self) -> int:
        return self.prompt_length + self.answer_length - 1  # the last answer token is never read

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        return answer_batch(self.sequences(self.split.sample("train", batch_size, generator)), self.prompt_length)

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        """`exact_match` (greedy generation's), and the teacher-forced accuracy of each answer position and of all
        (`token_metric`): greedy decoding, reading its own earlier tokens, may score a position lower."""
        self.check_evaluation(model, split, limit)
        model.config.check_positions(self.block_size, f"each {self.name} example")
        ids = self.split.evaluation_ids(split, limit)
        exact, correct = [], []  # per chunk, on the device until the end: two reads per split, not per chunk
        # Only randomized positions draw anything: seeded, so every evaluation of a model scores the same.
        generator = torch.Generator().manual_seed(0)
        with evaluating(model):
            for chunk in in_chunks(ids, EVAL_BATCH, split):
                batch = answer_batch(self.sequences(chunk), self.prompt_length).to(device)
                hits = self.answer_hits(model, batch, generator)  # (N, answer_length)
                exact.append(hits.all(dim=1).sum())
                correct.append(hits.sum(dim=0))
        exact, correct = int(torch.stack(exact).sum()), torch.stack(correct).sum(dim=0).cpu()
        n = len(ids)
        metrics = {"exact_match": exact / n, self.token_metric: float(correct.sum()) / (n * self.answer_length)}
        names = self.answer_position_names()
        metrics |= {f"{name}_accuracy": float(c) / n for name, c in zip(names, correct, strict=True)}
        return metrics | {"examples": float(n)}

    def answer_hits(self, model: GPT, batch: Batch, generator: torch.Generator) -> torch.Tensor:
        """Whether each answer token is the argmax given the true prefix (N, answer_length), from the head run there:
        at `answer_queries`, the same in every row, so the mask is made on the host without reading the targets."""
        n, length = batch.inputs.shape
        read = torch.zeros(n, length, dtype=torch.bool, device="cpu")  # (N, T), on the host
        read[:, self.answer_queries()] = True
        positions = model.sample_positions(n, length, generator) if model.config.randomized_positions else None
        logits = model(batch.inputs, positions=positions, read=read).logits  # (N * answer_length, V)
        return logits.argmax(dim=-1).view(n, self.answer_length) == batch.targets[:, self.answer_queries()]

    def probe_batch(self) -> Batch:
        ids = self.split.evaluation_ids("heldout", PROBE_EXAMPLES, seed=2)
        return answer_batch(self.sequences(ids), self.prompt_length)

    def single_token_corruptions(self, ids: torch.Tensor) -> torch.Tensor | None:
        """For activation patching: the example numbers whose prompts differ from each of `ids` (N,) in exactly one
        token (N, K); None, the default, when the task cannot name them."""
        return None

    def answer_queries(self) -> slice:
        """The input positions whose outputs predict the answer."""
        return slice(self.prompt_length - 1, self.prompt_length - 1 + self.answer_length)

    def example_prompts(self) -> list[str]:
        ids = self.split.evaluation_ids("heldout", 3, seed=1)
        return [self.decode(row.tolist()) for row in self.sequences(ids)[:, : self.prompt_length]]

    def attention_examples(self, n: int) -> list[str]:
        ids = self.split.evaluation_ids("heldout", n, seed=1)
        return [self.decode(row.tolist()) for row in self.sequences(ids)[:, :-1]]


def answer_batch(seq: torch.Tensor, prompt_length: int) -> Batch:
    """Whole sequences (N, T) -> the batch that reads all but the last token, scored on the answer."""
    targets = seq[:, 1:].clone()
    targets[:, : prompt_length - 1] = IGNORE_INDEX
    return Batch(seq[:, :-1], targets)
