"""Grade the steps that assemble the model: the learner's nn.Module built beside gpt-core's own (MultiHeadAttention,
Block, GPT), gpt-core's weights copied into it by name, in float64, forward and backward, and when the two differ,
the classic mistake named.

The learner's module is handed the course's kernels (`KERNELS`, the kernel steps' answers), so that what is graded
is the assembly alone; the order is the kernel steps': the parameters' names and shapes, then each case run with a
`Watch` on (an exception is one line naming the file and line, or the mistake that raises the same way), then the
outputs' structure (None, dtype, shape, detached), then the outputs and every gradient against gpt-core's, then what
the module called that the course has the learner write.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

import gpt_core
from gpt_train.kernels import TOLERANCE
from gpt_train.learn.cases import close, index_of
from gpt_train.learn.loading import describe, is_stub, where
from gpt_train.learn.solutions.attention import attention
from gpt_train.learn.solutions.cross_entropy import cross_entropy
from gpt_train.learn.solutions.gelu import gelu
from gpt_train.learn.solutions.layer_norm import layer_norm
from gpt_train.learn.steps import Step
from gpt_train.learn.watch import Watch
from gpt_train.learn.zoo import MISTAKES, Mistake

KERNELS = SimpleNamespace(attention=attention, layer_norm=layer_norm, gelu=gelu, cross_entropy=cross_entropy)
"""The kernels a module step's module is built with: kernels.attention(q, k, v, causal), kernels.layer_norm(x,
weight, bias, eps), kernels.gelu(x), kernels.cross_entropy(logits, targets)."""

SEED = 0


@dataclass(frozen=True)
class Case:
    """One build and call: the sizes the modules are built with, and those of the input."""

    name: str
    sizes: dict[str, int]
    batch: int
    positions: int


@dataclass(frozen=True)
class Outcome:
    """What a module gave on a case: each output by name and each gradient by name (the input's, "x", and every
    parameter's); or the exception it raised, building, in the forward or in the backward."""

    outputs: dict[str, Tensor]
    grads: dict[str, Tensor | None]
    error: BaseException | None = None
    kernel_calls: int = 0  # how many calls of the kernels it was handed came before the error


@dataclass(frozen=True)
class Assembly:
    """How one module step is built and run: gpt-core's module for the sizes, the learner's constructor's
    arguments, and whether it is the whole model (token ids and targets in, logits and the loss out)."""

    theirs: Callable[[dict[str, int]], nn.Module]
    arguments: Callable[[dict[str, int], SimpleNamespace], tuple]  # (sizes, kernels)
    whole_model: bool
    cases: tuple[Case, ...]


def _config(sizes: dict[str, int]) -> gpt_core.GPTConfig:
    shape = {"vocab_size": 2, "block_size": 16, "n_layer": 1} | sizes
    return gpt_core.GPTConfig(**shape)


_HEADS = (Case("4 heads of 8", {"n_embd": 32, "n_head": 4}, 2, 7),
          Case("3 heads of 8, one position", {"n_embd": 24, "n_head": 3}, 2, 1),
          Case("2 heads of 12, 13 positions", {"n_embd": 24, "n_head": 2}, 1, 13))  # fmt: skip

ASSEMBLIES = {
    "multi_head_attention": Assembly(
        lambda s: gpt_core.MultiHeadAttention(s["n_embd"], s["n_head"], bias=True, dropout_p=0.0),
        lambda s, kernels: (s["n_embd"], s["n_head"], kernels.attention), False, _HEADS),
    "block": Assembly(lambda s: gpt_core.Block(_config(s)), lambda s, kernels: (s["n_embd"], s["n_head"], kernels),
                      False, _HEADS),
    "model": Assembly(
        lambda s: gpt_core.GPT(_config(s)),
        lambda s, kernels: (s["vocab_size"], s["block_size"], s["n_layer"], s["n_head"], s["n_embd"], kernels), True,
        (Case("2 layers, 12 positions", {"vocab_size": 13, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16},
              2, 12),
         Case("1 layer of 4 heads, 5 positions",
              {"vocab_size": 11, "block_size": 8, "n_layer": 1, "n_head": 4, "n_embd": 32}, 3, 5))),
}  # fmt: skip
"""Each module step's builds and cases."""


def _randomised(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """`module` in float64 with every parameter drawn afresh: matrices ~ N(0, 1/fan_in), norms' weights near 1,
    biases near 0 but not 0, so that a weight or bias left out changes the numbers."""
    module = module.double()
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if param.dim() >= 2:
                param.copy_(noise / math.sqrt(param.shape[-1]))
            else:
                param.copy_(noise * 0.3 + (1.0 if name.endswith("weight") else 0.0))
    return module


def _theirs(assembly: Assembly, case: Case, seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = assembly.theirs(case.sizes)
    return _randomised(module, torch.Generator().manual_seed(seed))


def _inputs(assembly: Assembly, case: Case, seed: int) -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(seed + 1)
    if assembly.whole_model:
        idx = torch.randint(case.sizes["vocab_size"], (case.batch, case.positions), generator=generator)
        targets = torch.randint(case.sizes["vocab_size"], (case.batch, case.positions), generator=generator)
        targets[:, : case.positions // 2] = gpt_core.IGNORE_INDEX  # a prompt, unscored
        return idx, targets
    x = torch.randn(case.batch, case.positions, case.sizes["n_embd"], generator=generator, dtype=torch.float64)
    return (x.requires_grad_(),)


def _parameters(module: nn.Module) -> dict[str, Tensor]:
    """Every parameter by every name it has: a shared one (the tied head) under each of its names."""
    return dict(module.named_parameters(remove_duplicate=False))


class Mismatch(Exception):
    """The learner's module cannot take gpt-core's weights: its parameters are named or shaped otherwise."""


def _copy_weights(yours: nn.Module, theirs: nn.Module, cls_name: str) -> None:
    """gpt-core's weights into the learner's module by name; Mismatch if a name or a shape differs."""
    mine, reference = _parameters(yours), _parameters(theirs)
    extra, missing = sorted(set(mine) - set(reference)), sorted(set(reference) - set(mine))
    if extra:
        raise Mismatch(f"your {cls_name} has a parameter {extra[0]} that gpt-core's has not (gpt-core's are "
                       f"{', '.join(reference)})")  # fmt: skip
    if missing:
        raise Mismatch(f"your {cls_name} has no parameter {missing[0]} (gpt-core's are {', '.join(reference)})")
    for name, param in mine.items():
        if param.shape != reference[name].shape:
            raise Mismatch(
                f"your {cls_name}'s {name} has shape {tuple(param.shape)} where gpt-core's is "
                f"{tuple(reference[name].shape)} (nn.Linear(in, out) keeps its weight as (out, in))"
            )
    with torch.no_grad():
        for name, param in mine.items():
            param.copy_(reference[name])


def _run(module: nn.Module, assembly: Assembly, inputs: tuple[Tensor, ...], seed: int,
         forward: Callable[..., Any] | None = None) -> tuple[dict[str, Any], dict[str, Tensor | None]]:  # fmt: skip
    """The module's outputs on `inputs` and the gradients of its parameters (and of x) for a fixed cotangent (the
    loss, for the whole model). `forward` calls the module (by default, plainly)."""
    call = forward or module
    params = _parameters(module)
    if assembly.whole_model:
        got = call(*inputs)
        logits, loss = got if isinstance(got, tuple) and len(got) == 2 else (got, None)
        outputs = {"logits": logits, "loss": loss}
        if not _is_tensor(loss) or not loss.requires_grad:
            return outputs, {}
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        return outputs, dict(zip(params, grads, strict=True))
    output = call(*inputs)
    if not _is_tensor(output) or not output.requires_grad:
        return {"output": output}, {}
    cotangent = torch.randn(output.shape, generator=torch.Generator().manual_seed(seed), dtype=output.dtype)
    leaves = [inputs[0], *params.values()]
    grads = torch.autograd.grad(output, leaves, cotangent, allow_unused=True)
    return {"output": output.detach()}, dict(zip(["x", *params], grads, strict=True))


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Tensor)


def reference_outcomes(step: Step) -> list[Outcome]:
    """gpt-core's module's outcome on each case of `step`."""
    assembly = ASSEMBLIES[step.name]
    outcomes = []
    for i, case in enumerate(assembly.cases):
        theirs = _theirs(assembly, case, SEED + i)
        outputs, grads = _run(theirs, assembly, _inputs(assembly, case, SEED + i), SEED + i)
        outcomes.append(Outcome({k: v.detach() for k, v in outputs.items()}, grads))
    return outcomes


def module_outcomes(step: Step, cls: Callable[..., nn.Module], watch: Watch | None = None) -> list[Outcome]:
    """The outcome of the module `cls` builds (with gpt-core's weights) on each case of `step`; with a watch, every
    call into it is watched, the backward too. Whatever it raises (but Ctrl-C) is kept in the outcome's `error`."""
    assembly = ASSEMBLIES[step.name]
    outcomes = []
    for i, case in enumerate(assembly.cases):
        kernels, calls = _counted(KERNELS)
        try:
            yours = cls(*assembly.arguments(case.sizes, kernels))
            if not isinstance(yours, nn.Module):
                raise Mismatch(f"{step.function}(...) is a {type(yours).__name__}, not an nn.Module: subclass "
                               "nn.Module and call super().__init__()")  # fmt: skip
            yours = yours.double()
            _copy_weights(yours, _theirs(assembly, case, SEED + i), step.function)
            inputs = _inputs(assembly, case, SEED + i)
            if watch is None:
                outputs, grads = _run(yours, assembly, inputs, SEED + i)
            else:
                with watch.on():
                    outputs, grads = _run(yours, assembly, inputs, SEED + i, watch.watched(yours))
            outcomes.append(Outcome(outputs, grads))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a learner's SystemExit too: their code's result
            outcomes.append(Outcome({}, {}, error, calls[0]))
    return outcomes


def _counted(kernels: SimpleNamespace) -> tuple[SimpleNamespace, list[int]]:
    """`kernels`, each counting its calls into the one-element list returned with them: where in the forward an
    exception came (before the attention kernel, in the split; after it, in the merge)."""
    calls = [0]

    def counting(kernel: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls[0] += 1
            return kernel(*args)

        return call

    return SimpleNamespace(**{name: counting(kernel) for name, kernel in vars(kernels).items()}), calls


def difference_verdict(step: Step, failure: str, mistake: Mistake | None, refusal: str | None) -> tuple[bool, str]:
    """The failed verdict of a step whose results differ from the reference's: the named mistake when one
    matches, the first difference, and a refused call if the step also made one."""
    lines = [f"{step.name}: {mistake.message}", f"  first difference: {failure}"] if mistake else [
        f"{step.name}: {failure}"]  # fmt: skip
    lines += [f"  and {refusal}"] if refusal else []
    return False, "\n".join(lines)


# grading -------------------------------------------------------------------------------------------------------------
def grade_module(step: Step, cls: Callable[..., nn.Module], path: Path | None = None) -> tuple[bool, str]:
    """Whether the learner's class `cls` passes `step`, and the line (or lines) that say so or what is wrong."""
    watch = Watch(step.forbidden, allowed=tuple(vars(KERNELS).values()))
    outcomes = module_outcomes(step, cls, watch)
    expected = reference_outcomes(step)
    cases = ASSEMBLIES[step.name].cases
    raised = next((outcome.error for outcome in outcomes if outcome.error is not None), None)
    if raised is not None:
        if is_stub(raised):
            return False, (f"{where(raised, path)}: {step.function} is not written yet (it raises "
                           "NotImplementedError): write its body in place of the raise")  # fmt: skip
        mistake = diagnose_module(step, outcomes)
        if isinstance(raised, Mismatch):
            return False, f"{step.name}: {mistake.message if mistake else raised}"
        said = f"{where(raised, path)}: {step.function} raised {describe(raised)}"
        return False, said if mistake is None else f"{step.name}: {mistake.message}\n  {said}"
    problem = _malformed(step, cases, outcomes, expected)
    if problem is not None:
        return False, f"{step.name}: {problem}"
    failure = _first_difference(step, cases, outcomes, expected)
    refusal = watch.refusal(step.function, step.graded_against)
    if failure is not None:
        return difference_verdict(step, failure, diagnose_module(step, outcomes), refusal)
    if refusal is not None:
        return False, f"{step.name}: {refusal}"
    checks = sum(len(o.outputs) + len(o.grads) for o in expected)
    largest = max(_largest_difference(got, want) for got, want in zip(outcomes, expected, strict=True))
    return True, (f"{step.name}: passed, {checks} outputs and gradients beside gpt-core's {step.function} on "
                  f"{len(cases)} builds in float64, largest difference {largest:.1e}")  # fmt: skip


def _malformed(step: Step, cases: tuple[Case, ...], outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    returns = "(logits, loss)" if ASSEMBLIES[step.name].whole_model else "the output"
    for case, got, want in zip(cases, outcomes, expected, strict=True):
        for name, right in want.outputs.items():
            output = got.outputs.get(name)
            if output is None:
                return f"your {step.function} returns no {name}: return {returns}"
            if not _is_tensor(output):
                return f"your {step.function}'s {name} is a {type(output).__name__}, not a tensor: return {returns}"
            if output.dtype != right.dtype:
                return (f"your {step.function} returns {name} in {str(output.dtype).removeprefix('torch.')} for "
                        f"float64 weights and inputs: keep their dtype")  # fmt: skip
            if output.shape != right.shape:
                return (f"your {step.function}'s {name} has shape {tuple(output.shape)} where {tuple(right.shape)} "
                        f"is expected ({case.name})")  # fmt: skip
        if not got.grads:
            return "your output is detached from its inputs, so no gradient can flow"
    return None


def _differences(got: Outcome, want: Outcome) -> list[tuple[str, Tensor | None, Tensor]]:
    pairs = [(name, got.outputs.get(name), right) for name, right in want.outputs.items()]
    pairs += [(f"gradient of {name}", got.grads.get(name), right) for name, right in want.grads.items()
              if right is not None]  # fmt: skip
    return pairs


def _largest_difference(got: Outcome, want: Outcome) -> float:
    return max(float((ours.detach() - theirs).abs().max()) for _, ours, theirs in _differences(got, want))


def _first_difference(
    step: Step, cases: tuple[Case, ...], outcomes: list[Outcome], expected: list[Outcome]
) -> str | None:
    for case, got, want in zip(cases, outcomes, expected, strict=True):
        for what, ours, theirs in _differences(got, want):
            if ours is None:
                return f"{case.name}: {what} is missing: your forward never uses it"
            difference = (ours.detach() - theirs).abs().nan_to_num(nan=math.inf)
            if float(difference.max()) <= TOLERANCE * max(1.0, float(theirs.abs().max())):
                continue
            flat = int(difference.argmax())
            by = float(difference.flatten()[flat])
            return (f"{case.name}: {what} {index_of(flat, difference.shape)} differs from gpt-core's {step.function} "
                    f"by {by:.1e}, which exceeds the tolerance {TOLERANCE:.0e}")  # fmt: skip
    return None


def diagnose_module(step: Step, outcomes: list[Outcome]) -> Mistake | None:
    """The first of the step's mistakes whose module gives the learner's outputs and gradients on every case (or
    fails in the same way: the same exception after as many kernel calls, or the same parameters gpt-core's weights
    cannot go into)."""
    for mistake in MISTAKES.get(step.name, ()):
        for variant in mistake.kernels:
            if all(_agree(got, made) for got, made in zip(outcomes, module_outcomes(step, variant), strict=True)):
                return mistake
    return None


def _agree(got: Outcome, made: Outcome) -> bool:
    if got.error is not None or made.error is not None:
        return (got.error is not None and made.error is not None and type(got.error) is type(made.error)
                and describe(got.error) == describe(made.error) and got.kernel_calls == made.kernel_calls)  # fmt: skip
    if set(got.outputs) != set(made.outputs) or set(got.grads) != set(made.grads):
        return False
    return all(close(got.outputs[name], made.outputs[name]) for name in got.outputs) and all(
        close(got.grads[name], made.grads[name]) for name in got.grads)  # fmt: skip
