"""A CPU standing in for Apple's MPS device, which has no float64 (`tensor.double()` on an MPS tensor raises): a
tensor moved to a `torch.device` (the run's device) counts as on the device, as does whatever is computed from
one, and making a float64 or complex128 tensor there raises as MPS does; `.cpu()`, `.to("cpu")` and
`device="cpu"` lead back to the host. Every number is the CPU's own."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

WIDE = (torch.float64, torch.complex128)
HOST = torch.device("cpu")  # what `x.device` is for a tensor on the host; any other torch.device is the device's


def _to_host(args: tuple, kwargs: dict) -> bool | None:
    """Where a move or a factory puts its result: True for the host ("cpu", or a host tensor's `.device`), False
    for the device (any other torch.device, as the run's device is), None where it names neither."""
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.device):
            return value is HOST
        if isinstance(value, str) and value.split(":")[0] == "cpu":
            return True
    return None


class OnDevice(TorchFunctionMode):
    """A CPU standing in for an MPS device: float64 and complex128 tensors cannot live on it."""

    def __init__(self):
        super().__init__()
        self.on_device = WeakIdKeyDictionary()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:
            return torch.device("cpu") if args[0] in self.on_device else HOST
        out = func(*args, **kwargs)
        leaves = [leaf for leaf in tree_flatten((args, kwargs))[0] if isinstance(leaf, torch.Tensor)]
        target = True if func is torch.Tensor.cpu else _to_host(args[1:] if func is torch.Tensor.to else (), kwargs)
        if target is None:
            there = any(leaf in self.on_device for leaf in leaves)
        else:
            there = not target
        if func is torch.Tensor.numpy and any(leaf in self.on_device for leaf in leaves):
            raise TypeError("can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() first.")
        outputs = [leaf for leaf in tree_flatten(out)[0] if isinstance(leaf, torch.Tensor)]
        if target is not None and not isinstance(out, torch.nn.Parameter) and any(out is leaf for leaf in leaves):
            out = out.view_as(out)  # a move to where a tensor already is returns it: a new one moves, the old stays
            outputs = [out]
        if there:
            for output in outputs:
                if output.dtype in WIDE:
                    raise TypeError(f"{func}: MPS has no {output.dtype} (stand-in device)")
                self.on_device[output] = True
        return out
