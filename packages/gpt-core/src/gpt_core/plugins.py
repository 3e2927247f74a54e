"""The one plugin system of tasks and kernels: a module named by an entry point of group `gpt_tasks` or `gpt_kernels`
marks `register_tasks(register)` or `register_kernels(register)` with `@hookimpl`. A broken plugin is one warning; a
name two plugins register is an error naming both (gpt-tasks' README, "The plugin contract")."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
import warnings
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar

import pluggy

API_VERSION = 1
"""A plugin needing a later version raises ImportError on import, which the loader reports as a failed load."""

PROJECT = "gpt_plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class PluginSpecs:
    @hookspec
    def register_tasks(self, register: Callable[[type], None]) -> None:
        """Call `register(TaskClass)` once for every task this plugin provides."""

    @hookspec
    def register_kernels(self, register: Callable[[str, str, Callable[..., Any]], None]) -> None:
        """Call `register(slot, name, kernel)` once for every kernel this plugin provides."""


class PluginWarning(UserWarning):
    """A plugin that could not be loaded or could not register, or a name that two plugins register."""


@dataclass(frozen=True)
class Origin:
    """Where a registration comes from: the plugin (its entry point's name) and its distribution."""

    plugin: str
    distribution: str
    version: str

    @classmethod
    def of(cls, entry_point: EntryPoint) -> Origin:
        """A distribution whose metadata has no Name goes by the entry point's name, one with no Version "unknown":
        config.json records the version, and a run whose record holds none could not be read back."""
        dist = getattr(entry_point, "dist", None)
        if dist is None:  # an entry point made by hand, not read from an installed distribution
            return cls(entry_point.name, "unknown", "unknown")
        return cls(
            entry_point.name, _metadata(dist, "Name") or entry_point.name, _metadata(dist, "Version") or "unknown"
        )


def _metadata(dist: Any, key: str) -> str | None:
    """The distribution's metadata field `key` (stripped), else None: missing, empty, or the metadata unreadable."""
    try:
        value = dist.metadata.get(key)
    except Exception:  # metadata that cannot be read is metadata the distribution does not give
        return None
    return value.strip() if isinstance(value, str) and value.strip() else None


class RegisteredTwice(ValueError):
    """One plugin registering one key twice (the same class again, or a second under a name already used)."""


# An item has the `key` it is found by, its `label` ("task 'sort'") and `source` ("plugin 'flash' (dist 0.2.0)").
Item = TypeVar("Item")


@dataclass(frozen=True)
class PluginKind(Generic[Item]):
    """One kind of plugin; `accept` turns one `register(...)` call into an item, raising on one it refuses."""

    noun: str
    group: str
    hook: str
    accept: Callable[..., Item]
    warning: type[PluginWarning] = PluginWarning


class PluginTable(Generic[Item]):
    """The items the plugins of one kind register, by key, after `builtins`; keys registered twice are clashes."""

    def __init__(
        self, kind: PluginKind[Item], plugins: Iterable[EntryPoint] | None = None, builtins: Iterable[Item] = ()
    ):
        self.kind = kind
        self._manager = pluggy.PluginManager(PROJECT)
        self._manager.add_hookspecs(PluginSpecs)
        self._items: dict[Hashable, Item] = {item.key: item for item in builtins}
        self._clashes: dict[Hashable, list[Item]] = {}
        for entry_point in entry_points(group=kind.group) if plugins is None else plugins:
            for item in self._load(entry_point):
                self._add(item)

    def _load(self, entry_point: EntryPoint) -> list[Item]:
        """What one plugin registers; nothing, after a warning naming it, when it fails to import or to register."""
        origin = Origin.of(entry_point)
        name = f"{origin.distribution}:{entry_point.name}={entry_point.value}"  # a name is unique in its distribution
        try:
            self._manager.register(entry_point.load(), name=name)
        except (Exception, SystemExit) as error:  # a broken plugin must not take the others down, nor end the program
            self._warn(origin, "failed to load", error)
            return []
        registered: list[Item] = []

        def register(*args: Any, **kwargs: Any) -> None:
            item = self.kind.accept(origin, *args, **kwargs)
            if any(each.key == item.key for each in registered):  # not a clash of two plugins: this one's mistake
                raise RegisteredTwice(f"it registers {item.label} twice")
            registered.append(item)

        # This plugin's hook alone, so that one raising is attributed to it and drops only what it registered.
        hooks = [
            hook for hook in getattr(self._manager.hook, self.kind.hook).get_hookimpls() if hook.plugin_name == name
        ]
        if not hooks:
            self._warn(origin, "registers nothing", LookupError(f"it marks no {self.kind.hook} with @hookimpl"))
        for hook in hooks:
            try:
                hook.function(register=register)
            except (Exception, SystemExit) as error:
                self._manager.unregister(name=name)
                self._warn(origin, f"failed to register its {self.kind.noun}s", error)
                return []
        return registered

    def _warn(self, origin: Origin, what: str, error: Exception | SystemExit) -> None:
        plugin = f"{self.kind.noun} plugin {origin.plugin!r} ({origin.distribution})"
        if isinstance(error, SystemExit):
            said = f"it called sys.exit({error.code!r})"
        elif isinstance(error, RegisteredTwice):
            said = str(error)
        else:
            said = f"{type(error).__name__}: {error}"
        warnings.warn(f"{plugin} {what}: {said}", self.kind.warning, stacklevel=5)

    def _add(self, item: Item) -> None:
        if item.key in self._clashes:
            self._clashes[item.key].append(item)
        elif item.key in self._items:
            self._clashes[item.key] = [self._items.pop(item.key), item]
        else:
            self._items[item.key] = item
            return
        warnings.warn(self.clash(item.key), self.kind.warning, stacklevel=4)

    def clash(self, key: Hashable) -> str | None:
        """The message of a `key` that more than one plugin registers, else None."""
        items = self._clashes.get(key)
        if items is None:
            return None
        return f"{items[0].label} is registered by both {' and '.join(item.source for item in items)}"

    def items(self) -> list[Item]:
        """Every usable item (none whose key clashes), in registration order."""
        return list(self._items.values())

    def find(self, key: Hashable, error: type[Exception], unknown: str) -> Item:
        """The item registered as `key`; `error` saying the clash, or `unknown`, when there is not exactly one."""
        clash = self.clash(key)
        if clash is not None:
            raise error(f"{clash}; uninstall one of them")
        if key not in self._items:
            raise error(unknown)
        return self._items[key]


@contextlib.contextmanager
def plugin_modules(directory: Path, group: str) -> Iterator[Callable[[str, str], EntryPoint]]:
    """For tests: `make(module, source)` writes a plugin module and returns an entry point naming it."""
    path = str(directory)
    sys.path.insert(0, path)
    written: list[str] = []

    def make(module: str, source: str) -> EntryPoint:
        (directory / f"{module}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()  # the folder's listing may be cached from before the file existed
        written.append(module)
        return EntryPoint(name=module, value=module, group=group)

    try:
        yield make
    finally:
        sys.path.remove(path)
        for module in written:
            sys.modules.pop(module, None)
