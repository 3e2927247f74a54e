"""Grade the training_step step: the learner's step and gpt-train's own (`Trainer.train_step`'s order) each run a few
steps on the model step's answer with gpt-core's weights, in float64; every parameter is compared after every step.
The key bias is held looser (KEY_BIAS_TOLERANCE): its gradient is 0 in exact arithmetic, so what AdamW sees of it is
rounding divided by sqrt(v) + 1e-8, and any correct order of the sums moves it by about 1e-11."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

import gpt_core
from gpt_train.kernels import TOLERANCE
from gpt_train.learn.assembly import KERNELS, gpt_cores
from gpt_train.learn.cases import SEED, close, index_of
from gpt_train.learn.loading import attempt, solution
from gpt_train.learn.steps import Step
from gpt_train.learn.verdicts import same_error
from gpt_train.learn.watch import Watch
from gpt_train.optimisation import learning_rate, make_optimizer
from gpt_train.settings import TrainSettings

KEY_BIAS_TOLERANCE = 1e-9

SIZES = {"vocab_size": 11, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16}
BATCH = 4


@dataclass(frozen=True)
class Case:
    name: str
    settings: TrainSettings


CASES = (
    Case("8 steps, 3 of warm-up, clipped at 1.5",
         TrainSettings(steps=8, warmup_steps=3, lr=3e-2, min_lr=3e-3, weight_decay=0.1, grad_clip=1.5)),
    Case("5 steps, no warm-up, no clipping",
         TrainSettings(steps=5, warmup_steps=0, lr=2e-2, min_lr=2e-3, weight_decay=0.2, grad_clip=0.0)),
)  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """Every parameter by name after each step of a run, or the exception that ended it."""

    snapshots: list[dict[str, Tensor]]
    error: BaseException | None = None
    changed: str = ""  # the name of an argument the step changed in place ("": none)


def handed_model(sizes: dict[str, int], seed: int, theirs: nn.Module | None = None) -> nn.Module:
    """The model step's answer in float64 with the course's kernels and gpt-core's weights (`theirs`, or random)."""
    theirs = theirs or gpt_cores(gpt_core.GPT, gpt_core.GPTConfig(**sizes), seed)
    with torch.random.fork_rng(devices=[]):
        model = solution("model").GPT(**sizes, kernels=KERNELS).double()
    model.load_state_dict(theirs.state_dict())
    return model


def allowed() -> tuple[Callable[..., Any], ...]:
    """The shipped code the learner's code may call: the forwards of the model it is handed, and its kernels."""
    forwards = {type(module).forward for module in handed_model(SIZES, SEED).modules()}
    return (*forwards, *vars(KERNELS).values())


def _batches(case: Case, seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(case.settings.steps):
        shape = (BATCH, SIZES["block_size"])
        inputs = torch.randint(SIZES["vocab_size"], shape, generator=generator, device="cpu")
        targets = torch.randint(SIZES["vocab_size"], shape, generator=generator, device="cpu")
        targets[:, : shape[1] // 2] = gpt_core.IGNORE_INDEX  # a prompt, unscored
        yield inputs, targets


def gpt_train_step(model: nn.Module, optimizer: Any, inputs: Tensor, targets: Tensor, step: int, s: TrainSettings):
    """gpt-train's step on one batch as `Trainer.train_step` takes it (one micro-batch, no scaling, no Grokfast)."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, s)
    optimizer.zero_grad()
    _, loss = model(inputs, targets)
    loss.backward()
    if s.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
    optimizer.step()


def reference(step: Step) -> list[Outcome]:
    return run(step, _gpt_trains)


def _gpt_trains(model: nn.Module, state: dict, inputs: Tensor, targets: Tensor, step: int, s: TrainSettings) -> None:
    if not state:
        state["optimizer"] = make_optimizer(model, s)
    gpt_train_step(model, state["optimizer"], inputs, targets, step, s)


def run(step: Step, function: Callable[..., Any], watch: Watch | None = None) -> list[Outcome]:
    """Each case's run of the step `function` on a fresh model, one `state` dict kept from step to step; with a
    watch, every call watched. Whatever it raises (but Ctrl-C) ends the run and is kept in the outcome."""
    call = function if watch is None else watch.watched(function)
    outcomes = []
    for i, case in enumerate(CASES):
        snapshots: list[dict[str, Tensor]] = []
        changed: list[str] = []
        _, error = attempt(functools.partial(_train, call, case, SEED + i, snapshots, changed))
        outcomes.append(Outcome(snapshots, error, changed[0] if changed else ""))
    return outcomes


def _train(call: Callable[..., Any], case: Case, seed: int, snapshots: list[dict[str, Tensor]],
           changed: list[str]) -> None:  # fmt: skip
    model, state = handed_model(SIZES, seed), {}
    for step, (inputs, targets) in enumerate(_batches(case, seed)):
        given = {"inputs": inputs.clone(), "targets": targets.clone()}
        call(model, state, inputs, targets, step, dataclasses.replace(case.settings))  # settings of its own to change
        snapshots.append({name: param.detach().clone() for name, param in model.named_parameters()})
        changed += [name for name, batch in (("inputs", inputs), ("targets", targets)) if not batch.equal(given[name])]
        if changed:
            return


def passed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str:
    largest = max(_largest(got, want) for got, want in zip(outcomes, expected, strict=True))
    return (
        f"{sum(case.settings.steps for case in CASES)} steps on {len(CASES)} runs beside gpt-train's own step in "
        f"float64, every parameter after every step within {TOLERANCE:.0e} (the key bias "
        f"{KEY_BIAS_TOLERANCE:.0e}), largest difference {largest:.1e}"
    )


def malformed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    fn = step.function
    if changed := next((got.changed for got in outcomes if got.changed), ""):
        return f"your {fn} changed its argument {changed} in place: the caller's batch must stay as it was"
    for got, want in zip(outcomes, expected, strict=True):
        for after, right in zip(got.snapshots, want.snapshots, strict=True):
            for name, value in right.items():
                mine = after.get(name)
                if mine is None:
                    return f"after your {fn}, the model has no parameter {name}: update each parameter in place"
                if mine.shape != value.shape or mine.dtype != value.dtype:
                    return (f"after your {fn}, {name} is {str(mine.dtype).removeprefix('torch.')} of shape "
                            f"{tuple(mine.shape)} where {str(value.dtype).removeprefix('torch.')} of shape "
                            f"{tuple(value.shape)} is expected: update each parameter in place")  # fmt: skip
    first = handed_model(SIZES, SEED)
    if all(torch.equal(value, param) for (_, value), param in zip(outcomes[0].snapshots[-1].items(),
                                                                   first.parameters(), strict=True)):  # fmt: skip
        return (f"your {fn} leaves every parameter as it was: change them in place (param.sub_(...) or "
                "param -= ... under torch.no_grad()), not a new tensor bound to a name")  # fmt: skip
    return None


def _tolerances(name: str, like: Tensor, scale: float) -> Tensor:
    """TOLERANCE (relative to a scale above 1), KEY_BIAS_TOLERANCE for the key third of a qkv bias."""
    tolerance = torch.full_like(like, TOLERANCE * max(1.0, scale))
    if name.endswith("attn.qkv.bias"):
        width = like.shape[0] // 3
        tolerance[width : 2 * width] = KEY_BIAS_TOLERANCE
    return tolerance


def difference(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    for case, got, want in zip(CASES, outcomes, expected, strict=True):
        for number, (after, right) in enumerate(zip(got.snapshots, want.snapshots, strict=True), 1):
            for name, value in right.items():
                gap = (after[name] - value).abs().nan_to_num(nan=math.inf)
                tolerances = _tolerances(name, value, float(value.abs().max()))
                if not bool((gap > tolerances).any()):
                    continue
                flat = int((gap - tolerances).argmax())
                return (f"{case.name}: after step {number} of {case.settings.steps}, {name} "
                        f"{index_of(flat, gap.shape)} differs from gpt-train's step by "
                        f"{float(gap.flatten()[flat]):.1e}, which exceeds the tolerance "
                        f"{float(tolerances.flatten()[flat]):.0e}")  # fmt: skip
    return None


def _largest(got: Outcome, want: Outcome) -> float:
    """The largest difference held to TOLERANCE (the key bias's aside)."""
    largest = 0.0
    for after, right in zip(got.snapshots, want.snapshots, strict=True):
        for name, value in right.items():
            held = _tolerances(name, value, 1.0) < KEY_BIAS_TOLERANCE
            largest = max(largest, float((after[name] - value).abs()[held].max()))
    return largest


def agree(got: Outcome, made: Outcome) -> bool:
    if got.error is not None or made.error is not None:
        return same_error(got.error, made.error) and len(got.snapshots) == len(made.snapshots)
    return all(close(after.get(name), value) for after, right in zip(got.snapshots, made.snapshots, strict=True)
               for name, value in right.items())  # fmt: skip
