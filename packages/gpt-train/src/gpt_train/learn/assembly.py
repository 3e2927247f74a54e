"""Grade the steps that assemble the model: the learner's module beside gpt-core's own (MultiHeadAttention, Block, GPT)
with gpt-core's weights copied in by name, in float64, forward and backward. It is handed the course's kernels
(`KERNELS`, the kernel steps' answers), so that what is graded is the assembly alone."""

from __future__ import annotations

import functools
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
from gpt_train.learn import devices
from gpt_train.learn.cases import SEED, close, index_of
from gpt_train.learn.loading import attempt, describe
from gpt_train.learn.solutions.attention import attention
from gpt_train.learn.solutions.cross_entropy import cross_entropy
from gpt_train.learn.solutions.gelu import gelu
from gpt_train.learn.solutions.layer_norm import layer_norm
from gpt_train.learn.steps import Step
from gpt_train.learn.verdicts import Malformed, same_error
from gpt_train.learn.watch import Watch

KERNELS = SimpleNamespace(attention=attention, layer_norm=layer_norm, gelu=gelu, cross_entropy=cross_entropy)


@dataclass(frozen=True)
class Case:
    name: str
    sizes: dict[str, int]
    batch: int
    positions: int


@dataclass(frozen=True)
class Outcome:
    """Each output and gradient by name (the input's, "x", and every parameter's), or the exception raised."""

    outputs: dict[str, Tensor]
    grads: dict[str, Tensor | None]
    error: BaseException | None = None
    kernel_calls: int = 0  # how many calls of the kernels it was handed came before the error


def _config(sizes: dict[str, int]) -> gpt_core.GPTConfig:
    return gpt_core.GPTConfig(**({"vocab_size": 2, "block_size": 16, "n_layer": 1} | sizes))


THEIRS: dict[str, Callable[[dict[str, int]], nn.Module]] = {
    "multi_head_attention": lambda s: gpt_core.MultiHeadAttention(s["n_embd"], s["n_head"], bias=True, dropout_p=0.0),
    "block": lambda s: gpt_core.Block(_config(s)),
    "model": lambda s: gpt_core.GPT(_config(s)),
}

_HEADS = (
    Case("4 heads of 8", {"n_embd": 32, "n_head": 4}, 2, 7),
    Case("3 heads of 8, one position", {"n_embd": 24, "n_head": 3}, 2, 1),
    Case("2 heads of 12, 13 positions", {"n_embd": 24, "n_head": 2}, 1, 13),
)
CASES = {
    "multi_head_attention": _HEADS,
    "block": _HEADS,
    "model": (
        Case("2 layers, 12 positions", {"vocab_size": 13, "block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16},
             2, 12),
        Case("1 layer of 4 heads, 5 positions",
             {"vocab_size": 11, "block_size": 8, "n_layer": 1, "n_head": 4, "n_embd": 32}, 3, 5),
    ),
}  # fmt: skip


def randomised(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """`module` in float64, every parameter drawn afresh, biases not 0: a weight or bias left out shows."""
    module = module.double()
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if param.dim() >= 2:
                param.copy_(noise / math.sqrt(param.shape[-1]))
            else:
                param.copy_(noise * 0.3 + (1.0 if name.endswith("weight") else 0.0))
    return module


def gpt_cores(build: Callable[[Any], nn.Module], argument: Any, seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        built = build(argument)
    return randomised(built, torch.Generator().manual_seed(seed))


def _inputs(step: Step, case: Case, seed: int) -> tuple[Tensor, ...]:
    generator = torch.Generator().manual_seed(seed + 1)
    if step.name == "model":
        idx, targets = (torch.randint(case.sizes["vocab_size"], (case.batch, case.positions), generator=generator)
                        for _ in range(2))  # fmt: skip
        targets[:, : case.positions // 2] = gpt_core.IGNORE_INDEX  # a prompt, unscored
        return idx, targets
    x = torch.randn(case.batch, case.positions, case.sizes["n_embd"], generator=generator, dtype=torch.float64)
    return (x.requires_grad_(),)


def _parameters(module: nn.Module) -> dict[str, Tensor]:
    """Every parameter by every name it has (the tied head under both)."""
    return dict(module.named_parameters(remove_duplicate=False))


def _copy_weights(yours: nn.Module, theirs: nn.Module, cls_name: str) -> None:
    """gpt-core's weights into the learner's module by name; Malformed if a name or a shape differs."""
    mine, reference = _parameters(yours), _parameters(theirs)
    extra, missing = sorted(set(mine) - set(reference)), sorted(set(reference) - set(mine))
    if extra:
        raise Malformed(f"your {cls_name} has a parameter {extra[0]} that gpt-core's has not (gpt-core's are "
                        f"{', '.join(reference)})")  # fmt: skip
    if missing:
        raise Malformed(f"your {cls_name} has no parameter {missing[0]} (gpt-core's are {', '.join(reference)})")
    for name, param in mine.items():
        if param.shape != reference[name].shape:
            raise Malformed(
                f"your {cls_name}'s {name} has shape {tuple(param.shape)} where gpt-core's is "
                f"{tuple(reference[name].shape)} (nn.Linear(in, out) keeps its weight as (out, in))"
            )
    with torch.no_grad():
        for name, param in mine.items():
            param.copy_(reference[name])


def _call(step: Step, module: nn.Module, inputs: tuple[Tensor, ...], seed: int,
         forward: Callable[..., Any] | None = None) -> Outcome:  # fmt: skip
    """The outputs on `inputs` and the gradients of the parameters and x for a fixed cotangent (the model's loss); a
    model's logits without targets too."""
    got = (forward or module)(*inputs)
    if step.name == "model":
        logits, loss = got if isinstance(got, tuple) and len(got) == 2 else (got, None)
        untargeted = _without_targets(forward or module, inputs[0])
        outputs, end, cotangent, leaves = {"logits": logits, "loss": loss, UNTARGETED: untargeted}, loss, None, {}
    else:
        outputs, end, leaves = {"output": got}, got, {"x": inputs[0]}
        if isinstance(got, Tensor):
            cotangent = torch.randn(got.shape, generator=torch.Generator().manual_seed(seed), dtype=got.dtype)
    if not isinstance(end, Tensor) or not end.requires_grad:
        return Outcome(outputs, {})
    leaves |= _parameters(module)
    grads = torch.autograd.grad(end, list(leaves.values()), cotangent, allow_unused=True)
    return Outcome({k: v.detach() if isinstance(v, Tensor) else v for k, v in outputs.items()},
                   dict(zip(leaves, grads, strict=True)))  # fmt: skip


UNTARGETED = "logits with targets=None"
WITHOUT_TARGETS = "model(idx, None), as learn train's evaluation calls it"


def _without_targets(forward: Callable[..., Any], idx: Tensor) -> Any:
    """The logits of `forward(idx, None)`; Malformed unless it returns (logits, None)."""
    try:
        got = forward(idx, None)
    except Exception as error:
        raise Malformed(f"your GPT raised {describe(error)} on {WITHOUT_TARGETS}: with no targets there is no loss, "
                        "return (logits, None)") from None  # fmt: skip
    if not isinstance(got, tuple) or len(got) != 2:
        what = f"a tuple of {len(got)}" if isinstance(got, tuple) else f"a {type(got).__name__}"
        raise Malformed(f"your GPT returns {what} on {WITHOUT_TARGETS}: return the pair (logits, None)")
    if got[1] is not None:
        raise Malformed(f"your GPT returns a loss ({type(got[1]).__name__}) on {WITHOUT_TARGETS}: with no targets "
                        "there is no loss, return (logits, None)")  # fmt: skip
    return got[0]


def reference(step: Step) -> list[Outcome]:
    return [
        _call(step, gpt_cores(THEIRS[step.name], case.sizes, SEED + i), _inputs(step, case, SEED + i), SEED + i)
        for i, case in enumerate(CASES[step.name])
    ]


def run(step: Step, cls: Callable[..., nn.Module], watch: Watch | None = None) -> list[Outcome]:
    """What the module `cls` builds, with gpt-core's weights, gives on each case; with a watch, every call watched."""
    outcomes = []
    for i, case in enumerate(CASES[step.name]):
        kernels, calls = _counted(KERNELS)
        made, error = attempt(functools.partial(_built, step, cls, case, kernels, SEED + i, watch))
        outcomes.append(made if error is None else Outcome({}, {}, error, calls[0]))
    return outcomes


def _built(step: Step, cls: Callable, case: Case, kernels: SimpleNamespace, seed: int, watch: Watch | None):
    sizes = case.sizes | {"kernels": kernels}
    yours = cls(*(sizes[name] if name in sizes else getattr(kernels, name) for name in step.parameters))
    if not isinstance(yours, nn.Module):
        raise Malformed(f"{step.function}(...) is a {type(yours).__name__}, not an nn.Module: subclass nn.Module and "
                        "call super().__init__()")  # fmt: skip
    yours = yours.double()
    _copy_weights(yours, gpt_cores(THEIRS[step.name], case.sizes, seed), step.function)
    if watch is None:
        return _call(step, yours, _inputs(step, case, seed), seed)
    with watch.on():
        return _call(step, yours, _inputs(step, case, seed), seed, watch.watched(yours))


def off_device(step: Step, cls: Callable[..., nn.Module], path: Path | None) -> str | None:
    """Whether the module, moved as `learn train` moves it (`.to(device)`), meets its inputs with a tensor on the CPU
    on each case (`devices`): one it makes without device=, or a plain attribute `.to` leaves behind; a model
    called with targets and without."""

    def call(case: Case, targets: bool, watch: devices.DeviceWatch) -> None:
        sizes = case.sizes | {"kernels": KERNELS}
        yours = cls(*(sizes[name] if name in sizes else getattr(KERNELS, name) for name in step.parameters))
        yours.to(devices.DEVICE)
        for module in yours.modules():  # what `.to` moved is in _parameters and _buffers, not the instance's dict
            for name, value in vars(module).items():
                if isinstance(value, Tensor):
                    watch.origins[value] = devices.Origin(f"self.{name}", attribute=True)
        inputs = [devices.on_device(tensor) for tensor in _inputs(step, case, SEED)]
        if step.name == "model" and not targets:
            inputs[1] = None
        devices.backward(yours(*inputs), [*inputs[:1], *yours.parameters()])

    calls = [functools.partial(call, case, targets) for case in CASES[step.name]
             for targets in ((True, False) if step.name == "model" else (True,))]  # fmt: skip
    return devices.off_device(step, calls, path)


def _counted(kernels: SimpleNamespace) -> tuple[SimpleNamespace, list[int]]:
    """`kernels`, counting their calls into the list returned: where in the forward an exception came."""
    calls = [0]

    def counting(kernel: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return kernel(*args, **kwargs)  # `causal=True` by keyword, too

        return call

    return SimpleNamespace(**{name: counting(kernel) for name, kernel in vars(kernels).items()}), calls


def allowed() -> tuple[Callable[..., Any], ...]:
    return tuple(vars(KERNELS).values())


def passed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str:
    checks = sum(len(o.outputs) + len(o.grads) for o in expected)
    largest = max(_largest_difference(got, want) for got, want in zip(outcomes, expected, strict=True))
    return (f"{checks} outputs and gradients beside gpt-core's {step.function} on {len(CASES[step.name])} builds in "
            f"float64, largest difference {largest:.1e}")  # fmt: skip


def malformed(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    returns = "(logits, loss)" if step.name == "model" else "the output"
    for case, got, want in zip(CASES[step.name], outcomes, expected, strict=True):
        for name, right in want.outputs.items():
            output = got.outputs.get(name)
            if output is None:
                return f"your {step.function} returns no {name}: return {returns}"
            if not isinstance(output, Tensor):
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


def first_excess(ours: Tensor, theirs: Tensor) -> tuple[int, float] | None:
    """The flat index where `ours` differs most from `theirs`, and by how much, beyond the (relative) tolerance."""
    difference = (ours.detach().double() - theirs.detach().double()).abs().nan_to_num(nan=math.inf)
    if not difference.numel() or float(difference.max()) <= TOLERANCE * max(1.0, float(theirs.abs().max())):
        return None
    flat = int(difference.argmax())
    return flat, float(difference.flatten()[flat])


def difference(step: Step, outcomes: list[Outcome], expected: list[Outcome]) -> str | None:
    for case, got, want in zip(CASES[step.name], outcomes, expected, strict=True):
        for what, ours, theirs in _differences(got, want):
            if ours is None:
                return f"{case.name}: {what} is missing: your forward never uses it"
            if (excess := first_excess(ours, theirs)) is not None:
                return (f"{case.name}: {what} {index_of(excess[0], theirs.shape)} differs from gpt-core's "
                        f"{step.function} by {excess[1]:.1e}, which exceeds the tolerance {TOLERANCE:.0e}")  # fmt: skip
    return None


def agree(got: Outcome, made: Outcome) -> bool:
    if got.error is not None or made.error is not None:
        return same_error(got.error, made.error) and got.kernel_calls == made.kernel_calls
    if set(got.outputs) != set(made.outputs) or set(got.grads) != set(made.grads):
        return False
    return all(close(got.outputs[name], made.outputs[name]) for name in got.outputs) and all(
        close(got.grads[name], made.grads[name]) for name in got.grads)  # fmt: skip
