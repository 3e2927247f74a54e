"""Discover task plugins through the `gpt_tasks` entry-point group and build tasks by name.

Failures stay contained: a plugin that raises while importing or registering is reported as a
warning naming it and is left out, so every other task keeps working; two plugins claiming one
name make that name (and only that name) an error that names both.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from gpt_tasks.hooks import ENTRY_POINT_GROUP, PROJECT, TaskSpecs
from gpt_tasks.params import build_params
from gpt_tasks.task import Task


class TaskError(LookupError):
    """An unknown or ambiguous task name."""


class PluginWarning(UserWarning):
    """A plugin that could not be loaded or could not register its tasks."""


@dataclass(frozen=True)
class TaskInfo:
    """A registered task and where it comes from."""

    name: str
    task_class: type[Task]
    plugin: str
    distribution: str
    version: str

    @property
    def description(self) -> str:
        return self.task_class.description

    @property
    def source(self) -> str:
        return f"plugin {self.plugin!r} ({self.distribution} {self.version})"


def _distribution_of(entry_point: EntryPoint) -> tuple[str, str]:
    dist = getattr(entry_point, "dist", None)
    return (dist.name, dist.version) if dist is not None else ("unknown", "unknown")


def _check_task_class(task_class: Any) -> None:
    if not (isinstance(task_class, type) and issubclass(task_class, Task)):
        raise TypeError(f"register() takes a gpt_tasks.Task subclass, got {task_class!r}")
    if not isinstance(getattr(task_class, "name", None), str) or not task_class.name:
        raise TypeError(f"{task_class.__name__} has no task name (set the class attribute `name`)")


class Registry:
    """The tasks provided by a set of plugins (by default, every installed entry point)."""

    def __init__(self, plugins: Iterable[EntryPoint] | None = None):
        self._manager = pluggy.PluginManager(PROJECT)
        self._manager.add_hookspecs(TaskSpecs)
        self._tasks: dict[str, TaskInfo] = {}
        self._conflicts: dict[str, list[TaskInfo]] = {}
        for entry_point in entry_points(group=ENTRY_POINT_GROUP) if plugins is None else plugins:
            self._load(entry_point)

    def _load(self, entry_point: EntryPoint) -> None:
        distribution, version = _distribution_of(entry_point)
        try:
            plugin = entry_point.load()
            self._manager.register(plugin, name=entry_point.name)
        except Exception as error:  # a broken plugin must not take the others down
            self._warn(entry_point.name, distribution, "failed to load", error)
            return
        registered: list[TaskInfo] = []

        def register(task_class: type[Task]) -> None:
            _check_task_class(task_class)
            registered.append(TaskInfo(task_class.name, task_class, entry_point.name, distribution, version))

        # Each plugin's hook is called on its own, so that one raising is attributed to it and
        # its half-finished registrations are dropped without affecting anyone else's.
        for hook in self._manager.hook.register_tasks.get_hookimpls():
            if hook.plugin_name != entry_point.name:
                continue
            try:
                hook.function(register=register)
            except Exception as error:
                self._manager.unregister(name=entry_point.name)
                self._warn(entry_point.name, distribution, "failed to register its tasks", error)
                return
        for info in registered:
            self._add(info)

    @staticmethod
    def _warn(plugin: str, distribution: str, what: str, error: Exception) -> None:
        message = f"task plugin {plugin!r} ({distribution}) {what}: {type(error).__name__}: {error}"
        warnings.warn(message, PluginWarning, stacklevel=4)

    def _add(self, info: TaskInfo) -> None:
        if info.name in self._conflicts:
            self._conflicts[info.name].append(info)
        elif info.name in self._tasks:
            self._conflicts[info.name] = [self._tasks.pop(info.name), info]
        else:
            self._tasks[info.name] = info
            return
        sources = " and ".join(i.source for i in self._conflicts[info.name])
        warnings.warn(f"task {info.name!r} is registered by both {sources}", PluginWarning, stacklevel=3)

    def tasks(self) -> list[TaskInfo]:
        """Every usable task, sorted by name."""
        return [self._tasks[name] for name in sorted(self._tasks)]

    def info(self, name: str) -> TaskInfo:
        if name in self._conflicts:
            sources = " and ".join(i.source for i in self._conflicts[name])
            raise TaskError(f"task {name!r} is registered by both {sources}; uninstall one of them")
        if name not in self._tasks:
            available = ", ".join(sorted(self._tasks)) or "none installed"
            raise TaskError(f"unknown task {name!r}; available tasks: {available}")
        return self._tasks[name]

    def get(self, name: str, **params: Any) -> Task:
        """Build task `name` with `params` (Python values or strings), validated against its Params."""
        task_class = self.info(name).task_class
        return task_class(build_params(task_class.Params, params, what=f"{name} task parameter"))


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The registry of every installed plugin, discovered once per process."""
    return Registry()


def list_tasks() -> list[TaskInfo]:
    return default_registry().tasks()


def get_task(name: str, **params: Any) -> Task:
    """Build an installed task by name, e.g. `get_task("sort", length=8)`."""
    return default_registry().get(name, **params)
