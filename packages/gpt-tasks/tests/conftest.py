"""Shared fixtures for gpt-tasks' tests.

Helpers are handed out as fixtures rather than imported from a sibling module, so the suite
works under any pytest import mode in the monorepo. Tasks whose splits take a second to hash
are built once per session. No test reads the network or the user's cache: the downloader's
`urlopen` refuses, and XDG_CACHE_HOME points into a temporary folder.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from urllib.error import URLError

import pytest
import torch
from torch import nn

from gpt_core import GPT, GPTConfig, GPTOutput
from gpt_tasks import PromptAnswerTask, Task, get_task
from gpt_tasks.builtin import shakespeare

# A made-up alphabet: the generated corpus is random characters, never any real text.
CORPUS_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?'\n"
CORPUS_CHARS = 200_000
SMALL_CHUNKS = {"chunk_size": 32, "block_size": 8}  # 6,250 chunks of the generated corpus


def make_text(n_chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(CORPUS_ALPHABET) for _ in range(n_chars))


@pytest.fixture(autouse=True)
def _deterministic_torch():
    """Every test starts from the same global RNG state (model inits use the global RNG)."""
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """The tasks built once per session keep their split caches in the session's own folder, not the user's."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("session-xdg-cache")))
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No download and no user cache in any test, unless a test replaces `urlopen` itself."""

    def refuse(*args, **kwargs):
        raise URLError("network disabled in the test suite")

    monkeypatch.setattr(shakespeare, "urlopen", refuse)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """A generated stand-in for tiny-shakespeare: 200,000 random characters."""
    path = tmp_path_factory.mktemp("corpus") / "generated.txt"
    path.write_text(make_text(CORPUS_CHARS), encoding="utf-8")
    return path


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    """A 4,000-character generated corpus of this test's own, free to edit: 125 chunks of SMALL_CHUNKS."""
    path = tmp_path / "small.txt"
    path.write_text(make_text(4000, seed=1), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def sort_task() -> Task:
    return get_task("sort")


@pytest.fixture(scope="session")
def addition_task() -> Task:
    return get_task("addition")


@pytest.fixture(scope="session")
def modadd_task() -> Task:
    return get_task("modadd")


@pytest.fixture(scope="session")
def shakespeare_task(corpus_file) -> Task:
    """The generated corpus cut into many small chunks, so split fractions are well measured."""
    return get_task("shakespeare", data=str(corpus_file), **SMALL_CHUNKS)


@pytest.fixture
def builtin_tasks(sort_task, addition_task, modadd_task, corpus_file) -> list[Task]:
    """One of each built-in task, the text ones at their default block_size and chunk_size."""
    shakespeare = get_task("shakespeare", data=str(corpus_file))
    text = get_task("text", data=str(corpus_file))
    return [sort_task, addition_task, modadd_task, shakespeare, text, get_task("repeats")]


@pytest.fixture
def tiny_model() -> Callable[..., GPT]:
    """tiny_model(task, **config): an untrained one-layer GPT sized for `task`."""

    def make(task: Task, **config) -> GPT:
        shape = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": task.block_size} | config
        return GPT(GPTConfig(vocab_size=task.vocab_size, **shape))

    return make


@pytest.fixture
def greedy_by_hand() -> Callable[[PromptAnswerTask, GPT, torch.Tensor], dict[str, float]]:
    """greedy_by_hand(task, model, ids): the metrics PromptAnswerTask.evaluate must report on example
    numbers `ids`, computed independently of it: exact match by greedy decoding by full forward passes (no
    KV cache, no gpt_core.generate), then counting right answers; the per-position and token accuracies
    teacher-forced, from the argmax of one full forward pass over the true sequence."""

    def metrics(task: PromptAnswerTask, model: GPT, ids: torch.Tensor) -> dict[str, float]:
        seq, start, n = task.sequences(ids), task.prompt_length, len(ids)
        out = seq[:, :start]
        with torch.no_grad():
            for _ in range(task.answer_length):
                out = torch.cat((out, model(out).logits[:, -1].argmax(-1, keepdim=True)), dim=1)
            forced = model(seq[:, :-1]).logits[:, start - 1 :].argmax(-1)  # (N, answer_length)
        hits = forced == seq[:, start:]
        by_position = {
            f"{name}_accuracy": int(hits[:, i].sum()) / n for i, name in enumerate(task.answer_position_names())
        }
        token = int(hits.sum()) / (n * task.answer_length)
        exact = int((out[:, start:] == seq[:, start:]).all(dim=1).sum()) / n
        return {"exact_match": exact, task.token_metric: token, **by_position, "examples": n}

    return metrics


class Oracle(nn.Module):
    """A stand-in for a trained model of a prompt-answer task: at every position its logits pick the next
    token of the prompt followed by `answer(prompt)` (N, answer_length), as a model that had learned the
    task would; a GPT's `config`, so an evaluation can check the positions it reads."""

    def __init__(self, task: PromptAnswerTask, answer: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.task, self.answer = task, answer
        self.config = GPTConfig(vocab_size=task.vocab_size, block_size=task.block_size, n_layer=1, n_head=1, n_embd=1)

    def forward(self, idx: torch.Tensor, positions=None, read=None) -> GPTOutput:
        prompt = idx[:, : self.task.prompt_length]
        wanted = torch.cat((prompt, self.answer(prompt)), dim=1)[:, 1 : idx.shape[1] + 1]  # (N, T)
        logits = nn.functional.one_hot(wanted, self.task.vocab_size).float()
        return GPTOutput(logits if read is None else logits[read], None)


@pytest.fixture
def oracle() -> type[Oracle]:
    """oracle(task, answer): a model whose every prediction is the prompt followed by answer(prompt)."""
    return Oracle
