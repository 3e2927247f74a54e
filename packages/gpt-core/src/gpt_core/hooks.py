"""Hook points: a name for every intermediate of the forward pass, and the functions set on them.

A hook `fn(activation, name)` returns None to keep the activation or a tensor of its shape to replace it, autograd
included. `GPT.hooks` sets them for a with-block. A hook sees the call's T new positions, the first at `offset` (the
KV cache's filled length); with `read`, the last block's hooks from `ln2` on and the head's see the N read rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from torch import Tensor

HookFn = Callable[[Tensor, str], "Tensor | None"]
"""fn(activation, name) -> None (keep it) or a tensor of the same shape (use it instead)."""

MLP_POINTS = ("ln2", "mlp_hidden", "mlp_out")
"""The block points an attention-only block (GPTConfig.mlp=False) does not have."""

BLOCK_POINTS = ("resid_pre", "ln1", "q", "k", "v", "pattern", "z", "attn_out", "resid_mid", *MLP_POINTS, "resid_post")
"""The hook points of each block, in the order the forward reaches them."""


def block_hook(layer: int, point: str) -> str:
    """The name of hook point `point` of block `layer`: blocks.{layer}.{point}."""
    return f"blocks.{layer}.{point}"


def hook_names(n_layer: int, learned_positions: bool, mlp: bool = True) -> list[str]:
    """Every hook name of a model with `n_layer` blocks, in forward order."""
    points = BLOCK_POINTS if mlp else tuple(point for point in BLOCK_POINTS if point not in MLP_POINTS)
    names = ["embed", "pos_embed"] if learned_positions else ["embed"]
    names += [block_hook(layer, point) for layer in range(n_layer) for point in points]
    return [*names, "ln_final", "logits"]


def check_hooks(fns: Mapping[str, object], known: Sequence[str]) -> None:
    """Raise ValueError, in one line, for a name the model does not have or a hook that cannot be called."""
    if not isinstance(fns, Mapping):
        raise ValueError(f"hooks are a mapping {{name: fn}}, got a {type(fns).__name__}")
    known_set = set(known)
    for name, fn in fns.items():
        if name not in known_set:
            raise ValueError(
                f"unknown hook name {name!r}; this model's names are listed by GPT.hook_names() "
                f"({known[0]}, ..., {known[-1]})"
            )
        if not callable(fn):
            raise ValueError(f"the hook for {name!r} is not callable: {fn!r}")


def replaced(name: str, activation: Tensor, returned: object) -> Tensor:
    """What a hook's return value makes of `activation`: itself for None, else the tensor, of the same shape, dtype
    and device (a float32 replacement in a bf16 model failed later, in a product that did not name the hook)."""
    if returned is None:
        return activation
    if not isinstance(returned, Tensor):
        raise ValueError(f"the hook on {name!r} returned a {type(returned).__name__}; return None or a tensor")
    for what, got, wanted in (
        ("shape", tuple(returned.shape), tuple(activation.shape)),
        ("dtype", returned.dtype, activation.dtype),
        ("device", returned.device, activation.device),
    ):
        if got != wanted:
            raise ValueError(f"the hook on {name!r} returned {what} {got} for an activation of {what} {wanted}")
    return returned


class Hooks(dict[str, list[HookFn]]):
    """The hooks set on one model: for each name, the functions to call, outer (first set) first.

    A dict, so that `if hooks:` at a hook point is a dict's C-level emptiness test, which a forward without hooks
    pays instead of a module call per point. `offset` is set by `GPT.forward` only while a hook is set.
    """

    offset: int = 0

    def fire(self, name: str, activation: Tensor) -> Tensor:
        """`activation` after every hook on `name` has seen it (and perhaps replaced it)."""
        for fn in self.get(name, ()):
            activation = replaced(name, activation, fn(activation, name))
        return activation

    @contextmanager
    def added(self, fns: Mapping[str, HookFn]) -> Iterator[None]:
        """Set `fns` (already checked) for the with-block; it removes exactly what it added, raising or not."""
        entries = list(fns.items())
        for name, fn in entries:
            self.setdefault(name, []).append(fn)
        try:
            yield
        finally:
            for name, fn in reversed(entries):
                chain = self[name]
                del chain[max(i for i, f in enumerate(chain) if f is fn)]  # the last-set occurrence
                if not chain:
                    del self[name]


class HookPoints:
    """Mixed into a module that fires hook points: `hook(point, x)` fires the name `prefix + point`."""

    _hooks: Hooks
    _prefix: str

    def hook_points(self, hooks: Hooks | None, prefix: str = "") -> None:
        """Fire this module's points on `hooks` (the model's; a store of its own if None), named `prefix + point`."""
        self._hooks = Hooks() if hooks is None else hooks
        self._prefix = prefix

    def hook(self, point: str, x: Tensor) -> Tensor:
        """`x` after the hooks on this module's `point`: `x` itself, at once, while no hook is set."""
        return self._hooks.fire(self._prefix + point, x) if self._hooks else x

    def hooked(self, point: str) -> bool:
        """Whether a hook is set on this module's `point`. (Not `bool(self._hooks)`: torch.compile in 2.11, the oldest
        torch the packages ask for, cannot trace `bool` of a dict subclass, and breaks the model's graph there.)"""
        return self._prefix + point in self._hooks if self._hooks else False
