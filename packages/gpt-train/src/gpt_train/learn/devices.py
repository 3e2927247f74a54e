"""Whether a learner's code keeps to its inputs' device, checked on a machine with no GPU. Every check runs on CPU
inputs, and `learn train --device cuda` (or mps) then runs the same code on the GPU, where a tensor made without
device= (torch.ones, torch.arange ...) is still made on the CPU and the first operator that meets it with the inputs
raises. So a graded call is made once more with its inputs (and a module's parameters and buffers) on PyTorch's
`meta` device, a device other than the CPU that holds shapes and no values, under a dispatch mode that refuses an
ATen operator given a CPU tensor beside a meta one, as CUDA and MPS refuse it, and names the CPU tensor from where it
was made. A meta tensor has no values: a call that needs them (`.item()`, an `if` on a tensor) ends that call's
device check without a verdict, so that only a device mismatch ever fails a step, and a boolean mask counts as
keeping every position, so that the shapes after it run on."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from gpt_train.learn.loading import attempt
from gpt_train.learn.steps import Step

DEVICE = torch.device("meta")  # stands in for the GPU: not the CPU, and it computes shapes alone (no time)

_aten = torch.ops.aten
MOVES = {_aten._to_copy, _aten.copy_, _aten._copy_from, _aten._copy_from_and_resize}
"""Operators that move a tensor between devices (`.to`, `.copy_`): a CPU tensor beside a device one is their work."""
INDEXING = {_aten.index, _aten._unsafe_index, _aten.index_put, _aten.index_put_, _aten._index_put_impl_,
            _aten._unsafe_index_put}  # fmt: skip
"""Operators that take CPU indices into a tensor on any device (CUDA moves them), as `x[torch.arange(n)]` does; a
CPU tensor indexed by device ones is still a mismatch."""
NO_CPU_NUMBERS = {_aten.index_select, _aten.gather, _aten.embedding, _aten.scatter, _aten.scatter_add,
                  _aten.scatter_add_, _aten.scatter_, _aten.take, _aten.take_along_dim}  # fmt: skip
"""Operators that check every tensor's device, a 0-dim CPU one too (index_select(0, torch.tensor(1)) raises on
CUDA); elsewhere a 0-dim CPU tensor is taken as a number."""
MADE_FROM_DATA = {_aten.lift_fresh: "torch.tensor", _aten.lift_fresh_copy: "torch.tensor",
                  _aten.scalar_tensor: "torch.tensor"}  # fmt: skip
"""Operators behind a public function of another name; any other factory is named torch.<operator>."""


@dataclass(frozen=True)
class Origin:
    """Where a CPU tensor came from: the function that made it (torch.ones) and the learner's line, or the module
    attribute that holds it (self.mask)."""

    made_by: str
    at: str | None = None
    attribute: bool = False


def input_name(step: Step) -> str:
    """The name of the tensor whose device a tensor the step's code makes should take."""
    if step.kind == "kernel":
        return step.parameters[0]
    return "idx" if step.name == "model" else "x"


def made_on_cpu(step: Step, origin: Origin | None) -> str:
    """What the learner reads: the CPU tensor, why it fails on a GPU and what to write instead."""
    on_gpu = ("which `learn train --device cuda` (or mps) puts on the GPU: a device mismatch at the first training "
              "step;")  # fmt: skip
    x = input_name(step)
    if origin is None:
        return (f"your {step.function} uses a tensor on the CPU with its inputs, {on_gpu} make each tensor it "
                f"creates on the inputs' device, device={x}.device")  # fmt: skip
    if origin.attribute:
        name = origin.made_by.removeprefix("self.")
        return (f"your {step.function} keeps {origin.made_by}, a plain tensor attribute that model.to(device) leaves "
                f"on the CPU, and uses it with its inputs, {on_gpu} register it as a buffer, "
                f'self.register_buffer("{name}", ...), which moves with the model')  # fmt: skip
    return (f"your {step.function} creates a tensor on the CPU ({origin.made_by} without device=) and uses it with "
            f"its inputs, {on_gpu} make it on the inputs' device, device={x}.device")  # fmt: skip


class OffDevice(Exception):
    """A CPU tensor met a tensor on the device."""


class DeviceWatch(TorchDispatchMode):
    """Refuses an operator given a CPU tensor beside a tensor on DEVICE (not a 0-dim one, which CUDA takes as a
    number, but by NO_CPU_NUMBERS; not the indices of INDEXING), keeping what the CPU tensor came from in `found`; it
    records where each CPU tensor made under it comes from, a factory's name and the line in a file `learners` owns,
    inherited by what is computed from it."""

    def __init__(self, learners: Callable[[str], bool]):
        super().__init__()
        self.learners = learners
        self.origins = WeakIdKeyDictionary()  # CPU tensor -> Origin
        self.found: Origin | None = None
        self.mismatched = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [leaf for leaf in tree_flatten((args, kwargs))[0] if isinstance(leaf, Tensor)]
        on_device = any(tensor.device == DEVICE for tensor in tensors)
        packet = func.overloadpacket
        on_cpu = [t for t in tensors if t.device.type == "cpu" and (t.dim() > 0 or packet in NO_CPU_NUMBERS)]
        if packet in INDEXING:  # the indices may stay on the CPU; the tensor indexed and the values put may not
            indices = [index for index in args[1] if index is not None]
            on_cpu = [tensor for tensor in on_cpu if not any(tensor is index for index in indices)]
        if on_device and on_cpu and packet not in MOVES:
            if not self.mismatched:  # the first: a learner's `except` around it may go on to others
                self.found, self.mismatched = self.origins.get(on_cpu[0]), True
            raise OffDevice(f"{func}: a tensor on the CPU beside tensors on the device")
        if on_device and packet is _aten.nonzero:  # no values to count: as if every element were nonzero
            return torch.zeros((args[0].numel(), args[0].dim()), dtype=torch.long, device=DEVICE)
        if on_device and packet is _aten.index:
            args = (args[0], _every_position(args[1]), *args[2:])
        out = func(*args, **kwargs)
        if not on_device:
            origin = next((self.origins[tensor] for tensor in tensors if tensor in self.origins), None)
            if origin is None and (not tensors or packet in MADE_FROM_DATA):  # a factory: the tensor starts here
                origin = Origin(MADE_FROM_DATA.get(packet, f"torch.{packet.__name__}"), self._line())
            for made in tree_flatten(out)[0]:
                if origin is not None and isinstance(made, Tensor) and made.device.type == "cpu":
                    self.origins[made] = origin
        return out

    def _line(self) -> str | None:
        """`file:line` of the innermost frame in the learner's code."""
        frame = sys._getframe(1)
        while frame is not None:
            if self.learners(frame.f_code.co_filename):
                return f"{frame.f_code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return None


def _every_position(indices: list) -> list:
    """Each boolean mask on the device among `indices` as if it kept every position: a meta tensor has no values to
    count, and the shapes that follow run on (every position in both `logits[scored]` and `targets[scored]`: they
    still agree)."""
    every = []
    for index in indices:
        if isinstance(index, Tensor) and index.device == DEVICE and index.dtype in (torch.bool, torch.uint8):
            every += [torch.zeros(index.numel(), dtype=torch.long, device=DEVICE)] * index.dim()
        else:
            every.append(index)
    return every


def learners_files(path: Path | None) -> Callable[[str], bool]:
    """Whether a file is the learner's: in the folder of the graded file (where the files it imports are), if any."""
    if path is None:
        return lambda filename: False
    return lambda filename: Path(filename).parent == path.parent


def on_device(value: Any) -> Any:
    """A tensor argument as a fresh leaf on DEVICE (requiring a gradient where it did); anything else as it is."""
    if not isinstance(value, Tensor):
        return value
    return value.detach().to(DEVICE).requires_grad_(value.requires_grad)


def backward(output: Any, leaves: list[Tensor]) -> None:
    """Gradients of the leaves through every float tensor the output holds that requires one."""
    outputs = [leaf for leaf in tree_flatten(output)[0]
               if isinstance(leaf, Tensor) and leaf.requires_grad and leaf.is_floating_point()]  # fmt: skip
    wanted = [leaf for leaf in leaves if leaf.requires_grad]
    if outputs and wanted:
        torch.autograd.grad(outputs, wanted, [torch.ones_like(out) for out in outputs], allow_unused=True)


def off_device(step: Step, calls: Iterable[Callable[[DeviceWatch], Any]], path: Path | None) -> str | None:
    """What the learner reads for the first call (each handed the watch it runs under, its inputs on DEVICE) that
    meets a CPU tensor with them, or None; whatever else a call raises (a meta tensor has no values to read) ends
    that call alone."""
    for call in calls:
        watch = DeviceWatch(learners_files(path))
        with torch.enable_grad(), watch:  # as a training step calls it
            attempt(functools.partial(call, watch))
        if watch.mismatched:
            said = made_on_cpu(step, watch.found)
            return said if watch.found is None or watch.found.at is None else f"{said}\n  made at {watch.found.at}"
    return None
