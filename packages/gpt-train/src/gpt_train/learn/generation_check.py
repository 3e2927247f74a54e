"""Grade the generation step: the learner's `generate` on the model step's GPT beside gpt-core's `generate` on the same
weights, prompts and seeded generator, greedy and sampled, with the KV cache and without. One `torch.multinomial` a
token gives the same tokens; with use_cache=True, each block's qkv projection must take one new position a step."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

import gpt_core
from gpt_core.generate import generate as gpt_core_generate
from gpt_train.learn.assembly import gpt_cores
from gpt_train.learn.cases import SEED
from gpt_train.learn.loading import attempt
from gpt_train.learn.steps import Step
from gpt_train.learn.training_step_check import allowed as allowed  # this check's too: the same model and kernels
from gpt_train.learn.training_step_check import handed_model
from gpt_train.learn.verdicts import same_error
from gpt_train.learn.watch import Watch

SIZES = {"vocab_size": 13, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
PROMPTS, PROMPT_LENGTH, NEW_TOKENS = 3, 3, 12


@dataclass(frozen=True)
class Case:
    name: str
    temperature: float
    top_k: int | None
    use_cache: bool
    seed: int


CASES = (
    Case("greedy (temperature 0)", 0.0, None, False, 1),
    Case("greedy with the KV cache", 0.0, None, True, 2),
    Case("temperature 0.5 with the KV cache", 0.5, None, True, 3),
    Case("temperature 2", 2.0, None, False, 4),
    Case("top-k 3 at temperature 2 with the KV cache", 2.0, 3, True, 5),
    Case("top-k 5 at temperature 1.5", 1.5, 5, False, 6),
    Case("top-k 20 over a vocabulary of 13, with the KV cache", 1.0, 20, True, 7),  # gpt-core's keeps every token
)


@dataclass(frozen=True)
class Outcome:
    """The tokens (B, T + new), or the exception raised; and the positions each qkv projection's call took."""

    tokens: Any
    error: BaseException | None = None
    widths: tuple[int, ...] = ()
    changed: bool = False  # whether the call changed the caller's prompt in place


POSITION_SCALE = 3.0  # a larger position table: a cached token at the wrong position changes greedy decoding


def _weights(seed: int) -> gpt_core.GPT:
    model = gpt_cores(gpt_core.GPT, gpt_core.GPTConfig(**SIZES), seed).eval()
    with torch.no_grad():
        model.wpe.weight.mul_(POSITION_SCALE)
    return model


def _prompt(seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(SIZES["vocab_size"], (PROMPTS, PROMPT_LENGTH), generator=generator, device="cpu")


def reference(step: Step) -> list[Outcome]:
    model, idx = _weights(SEED), _prompt(SEED + 1)
    return [Outcome(gpt_core_generate(model, idx, NEW_TOKENS, case.temperature, case.top_k, case.use_cache,
                                      torch.Generator().manual_seed(case.seed))) for case in CASES]  # fmt: skip


def run(step: Step, function: Callable[..., Any], watch: Watch | None = None) -> list[Outcome]:
    """What `function` generates on each case from a fresh model; with a watch, every call watched."""
    call = function if watch is None else watch.watched(function)
    outcomes = []
    for case in CASES:
        model, widths = handed_model(SIZES, SEED, _weights(SEED)).eval(), []
        hooks = [block.attn.qkv.register_forward_hook(functools.partial(_add_width, widths)) for block in model.blocks]
        generator = torch.Generator().manual_seed(case.seed)
        prompt = _prompt(SEED + 1)
        arguments = (model, prompt, NEW_TOKENS, case.temperature, case.top_k, case.use_cache, generator)
        tokens, error = attempt(functools.partial(call, *arguments))
        for hook in hooks:
            hook.remove()
        outcomes.append(Outcome(tokens, error, tuple(widths), not prompt.equal(_prompt(SEED + 1))))
    return outcomes


def _add_width(widths: list[int], module: nn.Module, args: tuple, output: Any) -> None:
    """A qkv projection's forward hook: how many positions the call took."""
    x = args[0] if args else None
    widths.append(int(x.shape[-2]) if isinstance(x, Tensor) and x.dim() >= 2 else 0)


def passed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str:
    return (f"{len(CASES)} generations, {len(CASES) * PROMPTS * NEW_TOKENS} tokens, the same as gpt-core's generate "
            "(greedy, temperature, top-k; with and without the KV cache)")  # fmt: skip


def malformed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    fn = step.function
    for case, got, want in zip(CASES, outcomes, expected, strict=True):
        tokens, right = got.tokens, want.tokens
        if got.changed:
            return (f"your {fn} changed its argument idx in place ({case.name}): the caller's prompt must stay as it "
                    "was; build the output with torch.cat((idx, new), dim=1)")  # fmt: skip
        if tokens is None:
            return f"your {fn} returns None: `return` the prompt and the new tokens, (B, T + max_new_tokens)"
        if not isinstance(tokens, Tensor):
            return f"your {fn} returns a {type(tokens).__name__}, not a tensor of token ids"
        if tokens.dtype != right.dtype:
            return (f"your {fn} returns {str(tokens.dtype).removeprefix('torch.')} tokens: token ids are "
                    f"{str(right.dtype).removeprefix('torch.')} (argmax and multinomial give them)")  # fmt: skip
        if tokens.shape != right.shape:
            return (
                f"your {fn} returns shape {tuple(tokens.shape)} where {tuple(right.shape)} is expected ({case.name}"
                f"): the prompt's {PROMPT_LENGTH} tokens and the {NEW_TOKENS} new ones, in one row per prompt"
            )
        if not torch.equal(tokens[:, :PROMPT_LENGTH], right[:, :PROMPT_LENGTH]):
            return (f"your {fn}'s rows do not start with the prompt ({case.name}): return torch.cat((idx, new), "
                    "dim=1)")  # fmt: skip
    return None


def difference(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    """Where the tokens first differ; else a use_cache=True generation that did not decode from the cache."""
    for case, got, want in zip(CASES, outcomes, expected, strict=True):
        differs = (got.tokens != want.tokens).nonzero()
        if len(differs):
            row, column = (int(i) for i in differs[0])
            yours, theirs = int(got.tokens[row, column]), int(want.tokens[row, column])
            return (f"{case.name}: prompt {row}, new token {column - PROMPT_LENGTH + 1} is {yours} where gpt-core's "
                    f"generate gives {theirs}")  # fmt: skip
    for case, got in zip(CASES, outcomes, strict=True):
        if case.use_cache and any(width > 1 for width in got.widths[SIZES["n_layer"] :]):
            return ("with use_cache=True your generate puts the whole sequence through the model again at every "
                    "step: keep each block's keys and values, and feed only the new token")  # fmt: skip
    return None


def agree(got: Outcome, made: Outcome) -> bool:
    if got.error is not None or made.error is not None:
        return same_error(got.error, made.error)
    return isinstance(got.tokens, Tensor) and torch.equal(got.tokens, made.tokens)  # False for another shape
