"""What a learner's code calls while it is graded: the built-ins the course has them write, gpt-core's or the shipped
solutions' code, and autograd. A function mode names the public function, a dispatch mode the ATen operator behind
any route (the backward included), a profile function the Python functions entered; switched on around the
learner's calls only. It catches the built-in called by habit, not a file written to take it away (docs/learn.md)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.func
import torch.nn.functional as F
import torch.nn.utils
import torch.optim.lr_scheduler
from torch.optim.adam import adam
from torch.optim.adamw import adamw
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import gpt_core
import gpt_train.learn.solutions
import gpt_train.optimisation
from gpt_train.learn.steps import Step


@dataclass(frozen=True)
class Family:
    """Built-ins that compute one piece the course has the learner write."""

    key: str
    functions: dict[Any, str]  # public function -> how the message names it
    operators: dict[str, str]  # ATen operator name -> the public function that reaches it
    hint: str  # what to write it from
    entries: dict[Any, str] = field(default_factory=dict)  # Python function -> its name, seen when entered


_CLIPPING = {getattr(torch.nn.utils, name): f"torch.nn.utils.{name}"
             for name in ("clip_grad_norm_", "clip_grads_with_norm_", "get_total_norm")}  # fmt: skip

FAMILIES = {
    family.key: family
    for family in (
        Family(
            "softmax",
            {torch.softmax: "torch.softmax", F.softmax: "F.softmax", torch.Tensor.softmax: "Tensor.softmax",
             torch.special.softmax: "torch.special.softmax", F.softmin: "F.softmin",
             torch.log_softmax: "torch.log_softmax", F.log_softmax: "F.log_softmax",
             torch.Tensor.log_softmax: "Tensor.log_softmax", torch.special.log_softmax: "torch.special.log_softmax"},
            {"_softmax": "torch.softmax", "_softmax_backward_data": "torch.softmax", "_safe_softmax": "torch.softmax",
             "_log_softmax": "torch.log_softmax", "_log_softmax_backward_data": "torch.log_softmax"},
            "write it from exp and sum",
        ),
        Family(
            "attention",
            {F.scaled_dot_product_attention: "F.scaled_dot_product_attention",
             F.multi_head_attention_forward: "F.multi_head_attention_forward"},
            {"scaled_dot_product_attention": "F.scaled_dot_product_attention",
             "_scaled_dot_product_": "F.scaled_dot_product_attention"},  # every fused variant and its backward
            "write the scores, the mask and the softmax yourself",
        ),
        Family(
            "cross_entropy",
            {F.cross_entropy: "F.cross_entropy", F.nll_loss: "F.nll_loss"},
            {"nll_loss": "F.nll_loss", "cross_entropy_loss": "F.cross_entropy"},  # nll_loss_forward, 2d, backward
            "write it from max, exp, sum and log",
        ),
        Family(
            "layer_norm",
            {F.layer_norm: "F.layer_norm", torch.layer_norm: "torch.layer_norm",
             torch.native_layer_norm: "torch.native_layer_norm", F.group_norm: "F.group_norm",
             F.batch_norm: "F.batch_norm", F.instance_norm: "F.instance_norm"},
            {"native_layer_norm": "F.layer_norm", "native_group_norm": "F.group_norm",
             "native_batch_norm": "F.batch_norm", "_native_batch_norm_legit": "F.batch_norm",
             "batch_norm": "F.batch_norm", "instance_norm": "F.instance_norm"},
            "write it from the mean and the variance",
        ),
        Family(
            "gelu",
            {F.gelu: "F.gelu"},
            {"gelu": "F.gelu", "gelu_backward": "F.gelu"},
            "write it from torch.tanh",
        ),
        Family(
            "optimiser",
            {},
            {"_fused_adamw": "torch.optim.AdamW(fused=True)", "_fused_adam": "torch.optim.Adam(fused=True)"},
            "write the schedule, the clipping and AdamW's update from their formulas",
            {torch.optim.Optimizer.__init__: "a torch.optim optimiser",
             adamw: "torch.optim.adamw.adamw", adam: "torch.optim.adam.adam",
             torch.optim.lr_scheduler.LRScheduler.__init__: "a torch.optim.lr_scheduler",
             **_CLIPPING,
             gpt_train.optimisation.learning_rate: "gpt_train.optimisation.learning_rate",
             gpt_train.optimisation.make_optimizer: "gpt_train.optimisation.make_optimizer",
             gpt_train.optimisation.FusedAdamW.__init__: "gpt_train.optimisation.FusedAdamW"},
        ),
    )
}  # fmt: skip


def _code(function: Callable[..., Any]) -> Any:
    return getattr(inspect.unwrap(function), "__code__", None)


AUTOGRAD_ENTRIES = {
    code: name
    for function, name in (
        (torch.autograd.grad, "torch.autograd.grad"),
        (torch.autograd.backward, "torch.autograd.backward"),
        (torch.Tensor.backward, ".backward()"),
        *((getattr(torch.func, name), f"torch.func.{name}")
          for name in ("vjp", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian", "jvp", "linearize")),
        (torch.autograd.forward_ad.make_dual, "forward-mode AD (torch.autograd.forward_ad)"),
    )
    if (code := _code(function)) is not None
}  # fmt: skip
"""autograd's Python entry points, by code object (so an alias is the same entry)."""

ENGINE_CALL = "run_backward"  # the C function every backward pass goes through

GPT_CORE = Path(gpt_core.__file__).resolve().parent
SHIPPED = {
    str(GPT_CORE): "gpt-core's own code",
    str(Path(gpt_train.learn.solutions.__file__).resolve().parent): "the shipped solution",
}
NOT_SHIPPED = (str(GPT_CORE / "testing"),)  # the tile guard's LargestTensor runs around the learner's code


class Watch:
    """Records, while on, the built-ins of the `forbidden` families, shipped code entered (but `allowed`, what the
    check hands the learner's code) and autograd entered in the learner's forward or in a backward."""

    def __init__(self, forbidden: tuple[str, ...] = (), allowed: tuple[Callable[..., Any], ...] = ()):
        self.families = [FAMILIES[key] for key in forbidden]
        self._allowed = {code for function in allowed if (code := _code(function)) is not None}  # the check's own
        self.builtins: dict[str, str] = {}  # each built-in called (first seen first) -> its family's key
        self.shipped: dict[str, str] = {}  # each shipped function entered -> whose code it is
        self.autograd: list[str] = []
        self._depth = 0  # nested on()
        self._forward = 0  # inside the learner's function
        self._engine = 0  # inside a backward pass
        self._functions = {fn: (name, fam.key) for fam in self.families for fn, name in fam.functions.items()}
        self._entries = {code: (name, fam.key) for fam in self.families for fn, name in fam.entries.items()
                         if (code := _code(fn)) is not None}  # fmt: skip

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        self._depth += 1
        try:
            if self._depth > 1:
                yield
                return
            previous = sys.getprofile()
            with _Functions(self), _Operators(self):
                sys.setprofile(self._profile)
                try:
                    yield
                finally:
                    sys.setprofile(previous)
        finally:
            self._depth -= 1

    def watched(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function`, called with the watch on and counted as the learner's forward."""

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            self._forward += 1
            try:
                with self.on():
                    return function(*args, **kwargs)
            finally:
                self._forward -= 1

        return call

    def _operator(self, operator: str) -> None:
        for family in self.families:
            for prefix, name in family.operators.items():
                if operator.startswith(prefix):
                    if family.key not in self.builtins.values():  # else the function mode named it
                        self.builtins.setdefault(name, family.key)
                    return

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if (found := self._entries.get(code)) is not None:
                self.builtins.setdefault(*found)
            entry = AUTOGRAD_ENTRIES.get(code)
            if entry is not None and (self._forward or self._engine) and entry not in self.autograd:
                self.autograd.append(entry)
            whose = None if code in self._allowed else self._whose(code.co_filename)
            if whose is not None and (frame.f_back is None or self._whose(frame.f_back.f_code.co_filename) is None):
                name = f"{frame.f_globals.get('__name__', '?')}.{code.co_qualname}"
                self.shipped.setdefault(name, whose)
        elif getattr(arg, "__name__", None) == ENGINE_CALL:
            if event == "c_call":
                if (self._forward or self._engine) and not self.autograd:
                    self.autograd.append("the autograd engine")
                self._engine += 1
            elif event in ("c_return", "c_exception"):
                self._engine = max(0, self._engine - 1)

    def _whose(self, filename: str) -> str | None:
        if filename.startswith(NOT_SHIPPED):
            return None
        return next((whose for folder, whose in SHIPPED.items() if filename.startswith(folder)), None)

    def refusal(self, step: Step) -> str | None:
        """One line saying what the learner's function for `step` called that it may not, or None."""
        if self.builtins:
            name, family = next(iter(self.builtins.items()))
            what = "the built-in it is graded against" if family == step.graded_against else (
                "a built-in this course has you write")  # fmt: skip
            return f"your {step.function} calls {name}, {what}; {FAMILIES[family].hint}"
        if self.shipped:
            name, whose = next(iter(self.shipped.items()))
            return f"your {step.function} calls {name}, {whose}; write it yourself in your file"
        if step.handwritten_backward and self.autograd:
            return (f"your {step.function} calls {self.autograd[0]}, so autograd derives its gradient: write the "
                    "backward by hand from the saved tensors, with no autograd inside it")  # fmt: skip
        return None


class _Functions(TorchFunctionMode):
    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        found = self.watch._functions.get(func)
        if found is not None:
            self.watch.builtins.setdefault(*found)
        return func(*args, **(kwargs or {}))


class _Operators(TorchDispatchMode):
    def __init__(self, watch: Watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.watch._operator(func.__name__.partition(".")[0])
        return func(*args, **(kwargs or {}))
