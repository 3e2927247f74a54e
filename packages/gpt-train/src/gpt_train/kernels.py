"""Kernel plugins: found through the `gpt_kernels` entry-point group, named on the command line as
`--kernel SLOT=NAME`, pinned against PyTorch, and turned into a model's `gpt_core.Kernels`.

Loading is gpt_core.plugins' (the one loader of tasks and kernels): a plugin that fails to import or to
register is a warning naming it, and every other kernel and every task keeps working; two plugins
registering one SLOT=NAME make that name an error naming both. This registry lives in gpt-train because
gpt-train is where a run chooses its kernels, records them in config.json and holds PyTorch's references
to verify them with; a kernel plugin itself needs gpt-core alone.

A plugin is a module with a `register_kernels` hook, declared in the entry-point group:

    [project.entry-points.gpt_kernels]
    flash = "gpt_kernel_flash"

    @hookimpl                    # from gpt_core.plugins import hookimpl
    def register_kernels(register):
        register("attention", "flash", flash_attention)

A kernel not packaged yet is named by module path instead, `--kernel attention=mymodule:attention`,
looked up from the current directory as `python -m` would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint, version
from typing import Any

import torch

from gpt_core import DEFAULT_KERNELS, KERNEL_SLOTS, Kernels, Row, canonical_slot, kernel_report
from gpt_core import plugins as core_plugins
from gpt_train.errors import TrainError
from gpt_train.guard import guarded
from gpt_train.verify import TORCH_LABELS, torch_references

ENTRY_POINT_GROUP = "gpt_kernels"
HOOK = "register_kernels"
BUILTIN = "gpt-core"
"""The name of gpt-core's own kernel in every slot."""
TOLERANCE = 1e-12
"""The largest |difference| from PyTorch (float64) a kernel may show, forward or backward, to train with."""


class KernelError(TrainError):
    """A kernel that is unknown, ambiguous, not importable, or fails verification."""


class KernelPluginWarning(core_plugins.PluginWarning):
    """A kernel plugin that could not be loaded or could not register its kernels."""


class UnverifiedKernelWarning(UserWarning):
    """A kernel that fails verification, used anyway because the run says --unverified."""


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel and where it comes from."""

    slot: str
    name: str
    function: Callable[..., Any]
    plugin: str
    distribution: str
    version: str

    @property
    def description(self) -> str:
        doc = (getattr(self.function, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else ""

    @property
    def source(self) -> str:
        return f"plugin {self.plugin!r} ({self.distribution} {self.version})"

    @property
    def key(self) -> tuple[str, str]:
        return (self.slot, self.name)

    @property
    def label(self) -> str:
        return f"kernel {self.slot}={self.name}"


def _builtins() -> list[KernelInfo]:
    own = version("gpt-core")
    return [KernelInfo(s, BUILTIN, getattr(DEFAULT_KERNELS, s), "builtin", "gpt-core", own) for s in KERNEL_SLOTS]


def _accept(origin: core_plugins.Origin, slot: Any, name: Any, function: Any) -> KernelInfo:
    """One `register(slot, name, kernel)` call of a plugin, checked (a slot's deprecated name accepted)."""
    slot = canonical_slot(slot) if isinstance(slot, str) else slot
    if slot not in KERNEL_SLOTS:
        raise ValueError(f"register() takes a slot among {', '.join(KERNEL_SLOTS)}, got {slot!r}")
    if not isinstance(name, str) or not name or any(c in name for c in ":= ") or name == BUILTIN:
        raise ValueError(f"a kernel name has no ':', '=' or spaces and is not {BUILTIN!r}, got {name!r}")
    if not callable(function):
        raise TypeError(f"register() takes a callable kernel, got {function!r}")
    return KernelInfo(slot, name, function, origin.plugin, origin.distribution, origin.version)


KERNEL_PLUGINS = core_plugins.PluginKind("kernel", ENTRY_POINT_GROUP, HOOK, _accept, KernelPluginWarning)


class KernelRegistry:
    """gpt-core's own kernels and those of a set of plugins (by default, every installed entry point)."""

    def __init__(self, plugins: Iterable[EntryPoint] | None = None):
        self._table = core_plugins.PluginTable(KERNEL_PLUGINS, plugins, builtins=_builtins())

    def kernels(self) -> list[KernelInfo]:
        """Every usable kernel, by slot (in KERNEL_SLOTS order) and name, gpt-core's own first."""
        order = {slot: i for i, slot in enumerate(KERNEL_SLOTS)}
        return sorted(self._table.items(), key=lambda i: (order[i.slot], i.name != BUILTIN, i.name))

    def info(self, slot: str, name: str) -> KernelInfo:
        slot = canonical_slot(slot)
        installed = ", ".join(sorted(i.name for i in self._table.items() if i.slot == slot))
        where = "a module path is module:function"
        unknown = f"no kernel {name!r} for {slot} is installed (installed: {installed}; {where})"
        return self._table.find((slot, name), KernelError, unknown)


@lru_cache(maxsize=1)
def default_kernel_registry() -> KernelRegistry:
    """The registry of every installed kernel plugin, discovered once per process."""
    return KernelRegistry()


def parse_kernel_choices(pairs: Iterable[str]) -> dict[str, str]:
    """['attention=flash', ...] -> {slot: name}, each slot once; naming gpt-core's own kernel is the default."""
    choices: dict[str, str] = {}
    for pair in pairs:
        slot, sep, name = (part.strip() for part in pair.partition("="))
        slot = canonical_slot(slot)
        if not sep or not name:
            raise KernelError(f"--kernel expects SLOT=NAME, got {pair!r}; slots: {', '.join(KERNEL_SLOTS)}")
        if slot not in KERNEL_SLOTS:
            raise KernelError(f"unknown kernel slot {slot!r}; slots: {', '.join(KERNEL_SLOTS)}")
        if slot in choices:
            raise KernelError(f"--kernel names slot {slot} twice ({choices[slot]} and {name})")
        choices[slot] = name
    return {slot: name for slot, name in choices.items() if name != BUILTIN}


def resolve_kernel(slot: str, name: str) -> Callable[..., Any]:
    """The kernel NAME for `slot`: a registered one, or `module:function` imported from the current directory."""
    if ":" not in name:
        return default_kernel_registry().info(slot, name).function
    module_name, _, attribute = name.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:  # what `python -m` does, so a kernel in the working directory imports the same way
        sys.path.insert(0, cwd)
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as error:  # anything a user's module may raise while importing, or a missing name
        raise KernelError(f"kernel {slot}={name}: cannot load it ({type(error).__name__}: {error})") from None
    if not callable(found):
        raise KernelError(f"kernel {slot}={name} is not a function (it is {found!r:.60})")
    return found


def kernel_versions(choices: Mapping[str, str]) -> dict[str, str]:
    """The distribution and version of each chosen registered kernel, for config.json's `versions`."""
    found = {}
    for slot, name in choices.items():
        if ":" in name:  # a module path belongs to no distribution
            continue
        with contextlib.suppress(KernelError):  # not installed: build_kernels refuses it, in its own words
            info = default_kernel_registry().info(slot, name)
            found[info.distribution] = info.version
    return found


def build_kernels(choices: Mapping[str, str], base: Kernels = DEFAULT_KERNELS) -> Kernels:
    """The kernel table `base` with each chosen slot replaced, each guarded so that a kernel calling sys.exit
    fails as that kernel; KernelError if one cannot be found."""
    chosen = {slot: guarded(slot, name, resolve_kernel(slot, name)) for slot, name in choices.items()}
    return dataclasses.replace(base, **chosen)


def verify_kernel(
    slot: str, kernel: Callable[..., Any], seed: int | None = None, dtype: torch.dtype = torch.float64
) -> list[Row]:
    """`kernel` in `slot` against PyTorch's built-in on gpt-core's verification cases, in `dtype` (float64)."""
    return kernel_report(slot, kernel, torch_references(), dtype, seed=seed, labels=TORCH_LABELS)


def first_failure(rows: Iterable[Row], tolerance: float = TOLERANCE) -> str | None:
    return next((message for row in rows if (message := row.failure(tolerance)) is not None), None)


def checked_kernels(
    choices: Mapping[str, str],
    dropout: float,
    seed: int,
    verify: bool = True,
    unverified: Iterable[str] = (),
    base: Kernels = DEFAULT_KERNELS,
) -> Kernels:
    """The kernels a model computes with: the set `base` with each chosen one found and, with `verify`, pinned
    against PyTorch.

    Raises KernelError naming the kernel and its first failing case (case, output, difference, index), or
    the reason it cannot be used with this model; for a slot in `unverified` a failure is only a warning.
    """
    kernels = build_kernels(choices, base)
    try:
        kernels.check_dropout(dropout)
    except ValueError as error:
        raise KernelError(f"kernel attention={choices['attention']}: {error}") from None
    for slot, name in choices.items() if verify else ():
        failure = first_failure(verify_kernel(slot, getattr(kernels, slot), seed))
        if failure is None:
            continue
        if slot in unverified:
            warnings.warn(f"kernel {slot}={name} fails verification, {failure}; training with it anyway (--unverified)",
                          UnverifiedKernelWarning, stacklevel=2)  # fmt: skip
            continue
        raise KernelError(
            f"kernel {slot}={name} fails verification, {failure}; see `gpt-train verify --kernel {slot}={name}`, "
            "or train anyway with --unverified"
        )
    return kernels


# The first release's kernel marker, hookspec marker, pluggy project and hookspec class: gpt_core.plugins' one of each.
__getattr__ = core_plugins.deprecated_aliases(
    __name__,
    {
        "hookimpl": (core_plugins.hookimpl, "gpt_core.plugins.hookimpl"),
        "hookspec": (core_plugins.hookspec, "gpt_core.plugins.hookspec"),
        "PROJECT": (core_plugins.PROJECT, "gpt_core.plugins.PROJECT"),
        "KernelSpecs": (core_plugins.PluginSpecs, "gpt_core.plugins.PluginSpecs"),
    },
)
