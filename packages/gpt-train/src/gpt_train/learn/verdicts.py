"""What a check says, in one order for every check: an exception, then what is malformed, then where the values first
differ (with the mistake they agree with), then a tensor left on the CPU (`devices`), then a call the step may not
make; else the pass."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from gpt_train.learn.loading import describe, is_stub, where
from gpt_train.learn.steps import Step
from gpt_train.learn.watch import Watch
from gpt_train.learn.zoo import MISTAKES, Mistake


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str
    judged: bool = True  # False: stopped before a verdict on the code (the time limit), which says nothing of it


class Malformed(Exception):
    """The learner's code gave something no value check can be made on, said in one line."""


Judged = Callable[[Step, Sequence, Sequence], Any]  # (step, the learner's outcomes, the right ones) -> what is said


def judge(step: Step, path: Path | None, watch: Watch, outcomes: Sequence, expected: Sequence,
          diagnose: Callable[[], Mistake | None], malformed: Judged, difference: Judged, passed: Judged,
          requirement: Callable[[], str | None] | None = None,
          off_device: Callable[[], str | None] | None = None) -> Verdict:  # fmt: skip
    """The verdict on `outcomes` (each with an `error`), each later question asked only when the earlier ones pass;
    `off_device` and `requirement` run the code again."""
    error = next((outcome.error for outcome in outcomes if outcome.error is not None), None)
    if error is not None:
        return raised(step, error, path, diagnose)
    if (problem := malformed(step, outcomes, expected)) is not None:
        return Verdict(False, f"{step.name}: {problem}")
    failure, refusal = difference(step, outcomes, expected), watch.refusal(step)
    if failure is not None:  # the mistake the results agree with, where they first differ, and a refused call too
        mistake = diagnose()
        said = f"{mistake.message}\n  first difference: {failure}" if mistake else failure
        return Verdict(False, f"{step.name}: {said}" + (f"\n  and {refusal}" if refusal else ""))
    if off_device is not None and (said := off_device()) is not None:  # right on the CPU, wrong on a GPU
        return Verdict(False, f"{step.name}: {said}" + (f"\n  and {refusal}" if refusal else ""))
    if refusal is None and requirement is not None:  # what the step asks beyond the numbers (it runs the code again)
        refusal = requirement() or watch.refusal(step)
    if refusal is not None:
        return Verdict(False, f"{step.name}: {refusal}")
    return Verdict(True, f"{step.name}: passed, {passed(step, outcomes, expected)}")


def raised(step: Step, error: BaseException, path: Path | None, diagnose: Callable[[], Mistake | None]) -> Verdict:
    if is_stub(error):
        who = _raising_function(error, path, step)
        return Verdict(
            False,
            f"{where(error, path)}: {who} is not written yet (it raises NotImplementedError): write "
            "its body in place of the raise",
        )
    mistake = diagnose()
    if isinstance(error, Malformed):
        return Verdict(False, f"{step.name}: {mistake.message if mistake else error}")
    said = f"{where(error, path)}: {step.function} raised {describe(error)}"
    return Verdict(False, said if mistake is None else f"{step.name}: {mistake.message}\n  {said}")


def _raising_function(error: BaseException, path: Path | None, step: Step) -> str:
    """The learner's function the error came from (a helper still a stub), or the step's own (a class's method)."""
    names = [frame.name for frame in traceback.extract_tb(error.__traceback__) if frame.filename == str(path)]
    return names[-1] if names and step.kind in ("training", "generation") else step.function


def grade_runs(check: ModuleType, step: Step, function: Callable[..., Any], path: Path | None,
               off_device: Callable[[], str | None] | None = None) -> Verdict:  # fmt: skip
    """The verdict of a check module (assembly, training_step_check, generation_check) on the learner's `function`:
    its `run` watched and judged beside its `reference`, each of the step's mistakes run the same way, and given
    `off_device`, the device check."""
    watch = Watch(step.forbidden, allowed=check.allowed())
    outcomes = check.run(step, function, watch)

    def diagnose() -> Mistake | None:
        return first_mistake(step, outcomes, lambda variant: check.run(step, variant), check.agree)

    expected = check.reference(step)
    return judge(step, path, watch, outcomes, expected, diagnose, check.malformed, check.difference, check.passed,
                 off_device=off_device)  # fmt: skip


def first_mistake(step: Step, outcomes: Sequence, run: Callable[[Any], Sequence], agree: Callable) -> Mistake | None:
    """The first of the step's mistakes with a variant whose outcomes (`run(variant)`) all agree with the learner's
    (a mistake with `matches` is recognised by what a kernel's results show, which a module's are not)."""
    for mistake in MISTAKES.get(step.name, ()):
        if mistake.matches is not None:
            continue
        for variant in mistake.kernels:
            if all(agree(got, made) for got, made in zip(outcomes, run(variant), strict=True)):
                return mistake
    return None


def same_error(a: BaseException | None, b: BaseException | None) -> bool:
    """Both raised, the same exception with the same message (but for the name of a learner's autograd.Function)."""
    if a is None or b is None or type(a) is not type(b):
        return False
    return _FUNCTION_NAME.sub("Function", describe(a)) == _FUNCTION_NAME.sub("Function", describe(b))


_FUNCTION_NAME = re.compile(r"Function \w+")
