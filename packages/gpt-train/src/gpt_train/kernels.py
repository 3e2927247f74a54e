"""Kernel plugins: found through the `gpt_kernels` entry-point group, named on the command line as
`--kernel SLOT=NAME`, pinned against PyTorch, and turned into a model's `gpt_core.Kernels`.

The registry lives here, not in gpt-core or gpt-tasks: gpt-core depends on nothing but torch (pluggy
and installed distributions would be its first dependency and its first knowledge of an environment),
and gpt-tasks is about tasks; gpt-train is where a run chooses its kernels, records them in config.json
and holds PyTorch's references to verify them with. It has the task registry's shape: a plugin that
fails to import or to register is a warning naming it, and every other kernel and every task keeps
working; two plugins registering one SLOT=NAME make that name an error naming both.

A plugin is a module with a `register_kernels` hook, declared in the entry-point group:

    [project.entry-points.gpt_kernels]
    flash = "gpt_kernel_flash"

    @hookimpl                    # from gpt_train.kernels import hookimpl
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
from importlib.metadata import EntryPoint, entry_points, version
from typing import Any

import pluggy
import torch

from gpt_core import DEFAULT_KERNELS, KERNEL_SLOTS, Kernels, Row, canonical_slot, kernel_report
from gpt_train.errors import TrainError
from gpt_train.verify import TORCH_LABELS, torch_references

PROJECT = "gpt_kernels"
ENTRY_POINT_GROUP = "gpt_kernels"
BUILTIN = "gpt-core"
"""The name of gpt-core's own kernel in every slot."""
TOLERANCE = 1e-12
"""The largest |difference| from PyTorch (float64) a kernel may show, forward or backward, to train with."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class KernelSpecs:
    @hookspec
    def register_kernels(self, register: Callable[[str, str, Callable[..., Any]], None]) -> None:
        """Call `register(slot, name, kernel)` once for every kernel this plugin provides."""


class KernelError(TrainError):
    """A kernel that is unknown, ambiguous, not importable, or fails verification."""


class KernelPluginWarning(UserWarning):
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


def _builtins() -> list[KernelInfo]:
    own = version("gpt-core")
    return [KernelInfo(s, BUILTIN, getattr(DEFAULT_KERNELS, s), "builtin", "gpt-core", own) for s in KERNEL_SLOTS]


def _check_registration(slot: Any, name: Any, function: Any) -> None:
    if slot not in KERNEL_SLOTS:
        raise ValueError(f"register() takes a slot among {', '.join(KERNEL_SLOTS)}, got {slot!r}")
    if not isinstance(name, str) or not name or any(c in name for c in ":= ") or name == BUILTIN:
        raise ValueError(f"a kernel name has no ':', '=' or spaces and is not {BUILTIN!r}, got {name!r}")
    if not callable(function):
        raise TypeError(f"register() takes a callable kernel, got {function!r}")


class KernelRegistry:
    """gpt-core's own kernels and those of a set of plugins (by default, every installed entry point)."""

    def __init__(self, plugins: Iterable[EntryPoint] | None = None):
        self._manager = pluggy.PluginManager(PROJECT)
        self._manager.add_hookspecs(KernelSpecs)
        self._kernels = {(info.slot, info.name): info for info in _builtins()}
        self._conflicts: dict[tuple[str, str], list[KernelInfo]] = {}
        for entry_point in entry_points(group=ENTRY_POINT_GROUP) if plugins is None else plugins:
            self._load(entry_point)

    def _load(self, entry_point: EntryPoint) -> None:
        dist = getattr(entry_point, "dist", None)
        distribution, dist_version = (dist.name, dist.version) if dist is not None else ("unknown", "unknown")
        try:
            self._manager.register(entry_point.load(), name=entry_point.name)
        except Exception as error:  # a broken plugin must not take the others down
            self._warn(entry_point.name, distribution, "failed to load", error)
            return
        registered: list[KernelInfo] = []

        def register(slot: str, name: str, function: Callable[..., Any]) -> None:
            slot = canonical_slot(slot) if isinstance(slot, str) else slot
            _check_registration(slot, name, function)
            registered.append(KernelInfo(slot, name, function, entry_point.name, distribution, dist_version))

        for hook in self._manager.hook.register_kernels.get_hookimpls():
            if hook.plugin_name != entry_point.name:
                continue
            try:  # each plugin's hook on its own: one that raises is named, and its half-done registrations dropped
                hook.function(register=register)
            except Exception as error:
                self._manager.unregister(name=entry_point.name)
                self._warn(entry_point.name, distribution, "failed to register its kernels", error)
                return
        for info in registered:
            self._add(info)

    @staticmethod
    def _warn(plugin: str, distribution: str, what: str, error: Exception) -> None:
        message = f"kernel plugin {plugin!r} ({distribution}) {what}: {type(error).__name__}: {error}"
        warnings.warn(message, KernelPluginWarning, stacklevel=4)

    def _add(self, info: KernelInfo) -> None:
        key = (info.slot, info.name)
        if key in self._conflicts:
            self._conflicts[key].append(info)
        elif key in self._kernels:
            self._conflicts[key] = [self._kernels.pop(key), info]
        else:
            self._kernels[key] = info
            return
        sources = " and ".join(i.source for i in self._conflicts[key])
        message = f"kernel {info.slot}={info.name} is registered by both {sources}"
        warnings.warn(message, KernelPluginWarning, stacklevel=3)

    def kernels(self) -> list[KernelInfo]:
        """Every usable kernel, by slot (in KERNEL_SLOTS order) and name, gpt-core's own first."""
        order = {slot: i for i, slot in enumerate(KERNEL_SLOTS)}
        return sorted(self._kernels.values(), key=lambda i: (order[i.slot], i.name != BUILTIN, i.name))

    def info(self, slot: str, name: str) -> KernelInfo:
        slot = canonical_slot(slot)
        if (slot, name) in self._conflicts:
            sources = " and ".join(i.source for i in self._conflicts[(slot, name)])
            raise KernelError(f"kernel {slot}={name} is registered by both {sources}; uninstall one of them")
        if (slot, name) not in self._kernels:
            installed = ", ".join(n for s, n in sorted(self._kernels) if s == slot)
            raise KernelError(
                f"no kernel {name!r} for {slot} is installed (installed: {installed}; a module path is module:function)"
            )
        return self._kernels[(slot, name)]


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


def build_kernels(choices: Mapping[str, str]) -> Kernels:
    """The kernel table with each chosen slot replaced; KernelError if one cannot be found."""
    return dataclasses.replace(DEFAULT_KERNELS, **{slot: resolve_kernel(slot, name) for slot, name in choices.items()})


def verify_kernel(
    slot: str, kernel: Callable[..., Any], seed: int | None = None, dtype: torch.dtype = torch.float64
) -> list[Row]:
    """`kernel` in `slot` against PyTorch's built-in on gpt-core's verification cases, in `dtype` (float64)."""
    return kernel_report(slot, kernel, torch_references(), dtype, seed=seed, labels=TORCH_LABELS)


def first_failure(rows: Iterable[Row], tolerance: float = TOLERANCE) -> str | None:
    return next((message for row in rows if (message := row.failure(tolerance)) is not None), None)


def checked_kernels(
    choices: Mapping[str, str], dropout: float, seed: int, verify: bool = True, unverified: Iterable[str] = ()
) -> Kernels:
    """The kernels a model computes with: each chosen one found and, with `verify`, pinned against PyTorch.

    Raises KernelError naming the kernel and its first failing case (case, output, difference, index), or
    the reason it cannot be used with this model; for a slot in `unverified` a failure is only a warning.
    """
    kernels = build_kernels(choices)
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
