"""Grade the generation step: the learner's `generate`, handed the model step's GPT with gpt-core's weights, beside
gpt-core's own `generate` on the same weights, prompts and seeded generator, greedy and sampled, with the KV cache
and without; the tokens must be the same, and when they are not, the classic mistake is named.

The same draws give the same tokens when the learner draws as gpt-core does, one `torch.multinomial(probs, 1,
generator=generator)` a token, from probabilities equal to gpt-core's within rounding. With use_cache=True the check
also watches what goes through each block's qkv projection: after the prompt, one new position a step, never the
whole sequence again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import gpt_core
from gpt_core.generate import generate as gpt_core_generate
from gpt_train.learn.assembly import KERNELS, _randomised, difference_verdict
from gpt_train.learn.loading import describe, is_stub, where
from gpt_train.learn.solutions import model as minimal
from gpt_train.learn.steps import Step
from gpt_train.learn.training_step_check import handed_code, raising_function
from gpt_train.learn.watch import Watch
from gpt_train.learn.zoo import MISTAKES, Mistake

SEED = 0
SIZES = {"vocab_size": 13, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
PROMPTS, PROMPT_LENGTH, NEW_TOKENS = 3, 3, 12


@dataclass(frozen=True)
class Case:
    """One generation: how it decodes, and the seed of its generator."""

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
)


@dataclass(frozen=True)
class Outcome:
    """The tokens a generation gave (B, T + new), or the exception it raised; and, for the learner's, how many new
    positions each call of a block's qkv projection took, in order."""

    tokens: Any
    error: BaseException | None = None
    widths: tuple[int, ...] = ()


POSITION_SCALE = 3.0
"""The position table is drawn this many times larger than the other matrices, so that where a token sits shows in
the tokens drawn after it (a cached token put at the wrong position changes greedy decoding)."""


def _weights(seed: int) -> gpt_core.GPT:
    """gpt-core's GPT with its parameters drawn afresh (`assembly._randomised`), in float64."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = gpt_core.GPT(gpt_core.GPTConfig(**SIZES))
    model = _randomised(model, torch.Generator().manual_seed(seed)).eval()
    with torch.no_grad():
        model.wpe.weight.mul_(POSITION_SCALE)
    return model


def _model(seed: int) -> nn.Module:
    """The model step's GPT with the course's kernels and gpt-core's weights."""
    model = minimal.GPT(**SIZES, kernels=KERNELS).double()
    model.load_state_dict(_weights(seed).state_dict())
    return model.eval()


def _prompt(seed: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(SIZES["vocab_size"], (PROMPTS, PROMPT_LENGTH), generator=generator, device="cpu")


def reference_outcomes() -> list[Outcome]:
    """gpt-core's generate on each case."""
    model, idx = _weights(SEED), _prompt(SEED + 1)
    return [Outcome(gpt_core_generate(model, idx, NEW_TOKENS, case.temperature, case.top_k, case.use_cache,
                                      torch.Generator().manual_seed(case.seed))) for case in CASES]  # fmt: skip


def generation_outcomes(function: Callable[..., Any], watch: Watch | None = None) -> list[Outcome]:
    """What `function` generates on each case, from a fresh model and the cases' prompts; with a watch, every call
    watched. Whatever it raises (but Ctrl-C) is kept in the outcome."""
    call = function if watch is None else watch.watched(function)
    outcomes = []
    for case in CASES:
        model, widths = _model(SEED), []
        hooks = [block.attn.qkv.register_forward_hook(_recorder(widths)) for block in model.blocks]
        try:
            tokens = call(model, _prompt(SEED + 1), NEW_TOKENS, case.temperature, case.top_k, case.use_cache,
                          torch.Generator().manual_seed(case.seed))  # fmt: skip
            outcomes.append(Outcome(tokens, widths=tuple(widths)))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a learner's SystemExit too: their code's result
            outcomes.append(Outcome(None, error))
        finally:
            for hook in hooks:
                hook.remove()
    return outcomes


def _recorder(widths: list[int]) -> Callable[..., None]:
    """A forward hook adding to `widths` how many positions each call of a qkv projection took (its input's
    second-to-last dimension)."""

    def record(module: nn.Module, args: tuple, output: Any) -> None:
        x = args[0] if args else None
        widths.append(int(x.shape[-2]) if isinstance(x, Tensor) and x.dim() >= 2 else 0)

    return record


# grading -------------------------------------------------------------------------------------------------------------
def grade_generation(step: Step, function: Callable[..., Any], path: Path | None = None) -> tuple[bool, str]:
    """Whether the learner's `generate` passes, and the line (or lines) that say so or what is wrong."""
    watch = Watch(step.forbidden, allowed=handed_code())
    outcomes = generation_outcomes(function, watch)
    expected = reference_outcomes()
    raised = next((outcome.error for outcome in outcomes if outcome.error is not None), None)
    if raised is not None:
        if is_stub(raised):
            return False, (f"{where(raised, path)}: {raising_function(raised, path, step.function)} is not written "
                           "yet (it raises NotImplementedError): write its body in place of the raise")  # fmt: skip
        mistake = diagnose_generation(outcomes)
        said = f"{where(raised, path)}: {step.function} raised {describe(raised)}"
        return False, said if mistake is None else f"{step.name}: {mistake.message}\n  {said}"
    problem = _malformed(step, outcomes, expected)
    if problem is not None:
        return False, f"{step.name}: {problem}"
    failure = _first_difference(outcomes, expected)
    refusal = watch.refusal(step.function, step.graded_against)
    if failure is not None:
        return difference_verdict(step, failure, diagnose_generation(outcomes), refusal)
    refusal = refusal or _cache_unused(outcomes)
    if refusal is not None:
        return False, f"{step.name}: {refusal}"
    tokens = len(CASES) * PROMPTS * NEW_TOKENS
    return True, (f"{step.name}: passed, {len(CASES)} generations, {tokens} tokens, the same as gpt-core's generate "
                  "(greedy, temperature, top-k; with and without the KV cache)")  # fmt: skip


def _malformed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    """What is wrong before any token is compared: not a tensor, not token ids, the shape, the prompt not kept."""
    fn = step.function
    for case, got, want in zip(CASES, outcomes, expected, strict=True):
        tokens, right = got.tokens, want.tokens
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


def _first_difference(outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    for case, got, want in zip(CASES, outcomes, expected, strict=True):
        differs = (got.tokens != want.tokens).nonzero()
        if len(differs):
            row, column = (int(i) for i in differs[0])
            yours, theirs = int(got.tokens[row, column]), int(want.tokens[row, column])
            return (f"{case.name}: prompt {row}, new token {column - PROMPT_LENGTH + 1} is {yours} where gpt-core's "
                    f"generate gives {theirs}")  # fmt: skip
    return None


def _cache_unused(outcomes: list[Outcome]) -> str | None:
    """Why a use_cache=True generation did not decode from the cache (a qkv projection took more than the new
    position after the prompt), or None; said only when the calls were seen (the projections called as modules)."""
    blocks = SIZES["n_layer"]
    for case, got in zip(CASES, outcomes, strict=True):
        if case.use_cache and any(width > 1 for width in got.widths[blocks:]):
            return ("with use_cache=True your generate puts the whole sequence through the model again at every "
                    "step: keep each block's keys and values, and feed only the new token")  # fmt: skip
    return None


def diagnose_generation(outcomes: list[Outcome]) -> Mistake | None:
    """The first of the step's mistakes whose generate gives the learner's tokens on every case (or raises the same
    exception on the same cases)."""
    for mistake in MISTAKES.get("generation", ()):
        for variant in mistake.kernels:
            if all(_agree(got, made) for got, made in zip(outcomes, generation_outcomes(variant), strict=True)):
                return mistake
    return None


def _agree(got: Outcome, made: Outcome) -> bool:
    if got.error is not None or made.error is not None:
        return (got.error is not None and made.error is not None and type(got.error) is type(made.error)
                and describe(got.error) == describe(made.error))  # fmt: skip
    return (isinstance(got.tokens, Tensor) and got.tokens.shape == made.tokens.shape
            and bool((got.tokens == made.tokens).all()))  # fmt: skip
