"""A prompt to a trained model, for `gpt-train sample` and the explorer: its checks, its answer's length, a note."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

from gpt_core import GPT
from gpt_tasks import PromptAnswerTask, Task
from gpt_tasks.builtin.text import TextVocabulary
from gpt_train.errors import TrainError

MAX_PROMPT_CHARACTERS = 2_000  # refused before encoding: the explorer draws a prompt's attention whole


class PromptError(TrainError):
    """A prompt the model cannot read: empty, too long, or holding what the task cannot encode."""


Vocabulary = Task | TextVocabulary  # what `RunConfig.build_sampler` gives


def encoded(vocabulary: Vocabulary, model: GPT, text: str) -> list[int]:
    if not text:
        raise PromptError("type a prompt: it is empty")
    if len(text) > MAX_PROMPT_CHARACTERS:
        raise PromptError(
            f"the prompt is {len(text):,} characters long; the explorer takes at most {MAX_PROMPT_CHARACTERS:,}"
        )
    try:
        ids = vocabulary.encode(text)
    except ValueError as error:
        raise PromptError(f"the task cannot encode {text!r}: {error}") from None
    if not ids:
        raise PromptError(f"{text!r} encodes to no tokens")
    limit = model.config.position_limit  # None: rope and none positions run on
    if limit is not None and len(ids) > limit:
        raise PromptError(
            f"the prompt is {len(ids)} tokens long; the model's learned positions read at most {limit}, and it "
            "needs room for its answer"
        )
    return ids


def prompt_generator(device: torch.device, text: str, seed: int = 0, earlier: int = 0) -> torch.Generator:
    """The generator of one prompt's draws (a randomized model's position ids, a sample's tokens), on `device`, seeded
    from `seed`, the prompt's text and how many times that text came `earlier`: a sample depends on no other prompt,
    two prompts do not draw the same numbers (which made their samples alike), and a prompt given again draws a new
    sample. `gpt-train sample` and the explorer both draw from it, so the page's greedy answer is sample's on the
    same device (a CUDA generator draws other numbers than a CPU one)."""
    digest = hashlib.sha256(f"{seed}\0{earlier}\0{text}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def answer_tokens(vocabulary: Vocabulary, model: GPT, n_prompt: int) -> int:
    """How many tokens answer a prompt of `n_prompt`: a prompt-answer task's answer within the model's positions,
    or for text as many as fill the block, and at least half a block after a long prompt."""
    if not isinstance(vocabulary, PromptAnswerTask):
        block = model.config.block_size
        return max(1, block + 1 - n_prompt, block // 2)
    limit = model.config.position_limit
    if limit is not None and n_prompt > limit:
        raise PromptError(f"{n_prompt} tokens, and the model reads at most {limit}")
    n_new = vocabulary.answer_length_for(n_prompt)
    return max(1, n_new if limit is None else min(n_new, limit + 1 - n_prompt))


def cut_answer_note(
    vocabulary: Vocabulary, model: GPT, n_prompt: int, n_answer: int, wanted: int = 0, read_limit: int | None = None
) -> str:
    """A sentence when an answer of `n_answer` tokens is cut short: a prompt-answer task's whole answer, or `wanted`
    tokens of text. The cut is the model's positions', or where the explorer reads at most `read_limit` tokens (its
    page's size) and they end first."""
    full = vocabulary.answer_length_for(n_prompt) if isinstance(vocabulary, PromptAnswerTask) else wanted
    if n_answer >= full:
        return ""
    limit = model.config.position_limit  # None: rope and none positions run on, and only the explorer cuts
    if read_limit is not None and (limit is None or read_limit < limit):
        why = f"the explorer reads at most {read_limit} tokens, prompt and answer together"
    else:
        why = f"the model reads {limit} positions"
    return f"the answer is cut to {n_answer} of its {full} tokens: {why}"


def untrained_prompt_note(vocabulary: Vocabulary, ids: Sequence[int]) -> str:
    """A sentence when the task never trains on a prompt like `ids` (or the task's own `prompt_note`), else ''."""
    own = getattr(vocabulary, "prompt_note", None)
    if callable(own):
        return own(list(ids))
    n_prompt = len(ids)
    if not isinstance(vocabulary, PromptAnswerTask) or n_prompt in vocabulary.prompt_lengths:
        return ""
    lengths = sorted(vocabulary.prompt_lengths)
    contiguous = len(lengths) > 2 and lengths == list(range(lengths[0], lengths[-1] + 1))
    trained = f"{lengths[0]} to {lengths[-1]}" if contiguous else " or ".join(map(str, lengths))
    example = vocabulary.example_prompts()[0]
    return (
        f"{vocabulary.name} trains on prompts of {trained} tokens, like {example!r}, and this one has {n_prompt}: "
        "the model never learned to answer it"
    )
