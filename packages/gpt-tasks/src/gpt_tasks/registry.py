"""Task plugins, found through the `gpt_tasks` entry-point group by gpt_core.plugins' loader, and tasks built by
name (the README's "The registry")."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass
from functools import lru_cache
from importlib.metadata import EntryPoint
from typing import Any

from gpt_core.plugins import Origin, PluginKind, PluginTable
from gpt_core.plugins import PluginWarning as AnyPluginWarning
from gpt_tasks.params import SUPPORTED_TYPES, build_params, field_types, supported_type, type_name
from gpt_tasks.task import Task

ENTRY_POINT_GROUP = "gpt_tasks"


class TaskError(LookupError):
    """An unknown or ambiguous task name."""


class PluginWarning(AnyPluginWarning):
    """A plugin that could not be loaded or could not register its tasks."""


@dataclass(frozen=True)
class TaskInfo:
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

    @property
    def key(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return f"task {self.name!r}"


SPLITS = ("train", "heldout")  # what `evaluate` scores


def _accept(origin: Origin, task_class: Any) -> TaskInfo:
    """The task class, checked against the contract where a mistake would otherwise surface mid-run."""
    if not (isinstance(task_class, type) and issubclass(task_class, Task)):
        raise TypeError(f"register() takes a gpt_tasks.Task subclass, got {task_class!r}")
    name = getattr(task_class, "name", None)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise TypeError(
            f"{task_class.__name__}.name must be letters, digits, '_', '.' or '-' (a run's folder), got {name!r}"
        )
    try:
        _check_contract(task_class)
    except TypeError as error:
        raise TypeError(f"task {name!r}: {error}") from None
    return TaskInfo(name, task_class, origin.plugin, origin.distribution, origin.version)


def _check_contract(task_class: type[Task]) -> None:
    """TypeError for a member the run, eval, `tasks` or config.json would trip over later (after files are written)."""
    cls = task_class.__name__
    if inspect.isabstract(task_class):
        raise TypeError(f"{cls} leaves {', '.join(sorted(task_class.__abstractmethods__))} unwritten")
    _check_attribute(task_class, "primary_metric", lambda v: isinstance(v, str) and v, "a key of evaluate()'s metrics")
    _check_attribute(task_class, "higher_is_better", lambda v: isinstance(v, bool), "True or False")
    _check_attribute(task_class, "description", lambda v: isinstance(v, str), "a str, one line for `gpt-train tasks`")
    _check_attribute(
        task_class,
        "eval_splits",
        lambda v: isinstance(v, tuple) and "heldout" in v and set(v) <= set(SPLITS) and len(set(v)) == len(v),
        "('heldout',) or ('train', 'heldout') (the primary metric is the held-out one)",
    )
    _check_attribute(
        task_class,
        "per_example_metrics",
        lambda v: isinstance(v, tuple) and all(isinstance(each, str) for each in v),
        "a tuple of metric names",
    )
    params = getattr(task_class, "Params", None)
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        raise TypeError(f"{cls}.Params must be a dataclass, got {params!r}")
    fields = dataclasses.fields(params)
    needed = [field.name for field in fields if field.default is MISSING and field.default_factory is MISSING]
    if needed:
        raise TypeError(f"{cls}.Params has fields without a default: {', '.join(needed)}")
    try:
        types = field_types(params)
    except Exception as error:  # NameError for a type imported under TYPE_CHECKING alone, or any unresolvable hint
        raise TypeError(
            f"{cls}.Params's annotations do not resolve ({type(error).__name__}: {error}): a type a field names must "
            "be importable when the plugin runs, not only under TYPE_CHECKING"
        ) from None
    for field, annotation in types.items():
        if not supported_type(annotation):
            raise TypeError(
                f"{cls}.Params field {field!r} is {type_name(annotation)}, which --set and config.json cannot give: "
                f"a task parameter is {SUPPORTED_TYPES}"
            )
    # the default names the toolkit's split parameter, which a task split another way has no field for
    unknown = sorted(set(task_class.eval_fixed) - set(types) - set(Task.eval_fixed))
    if unknown:
        raise TypeError(f"{cls}.eval_fixed names {', '.join(unknown)}, not fields of its Params")


def _check_attribute(task_class: type[Task], attribute: str, good: Callable[[Any], Any], wanted: str) -> None:
    if not hasattr(task_class, attribute):
        raise TypeError(f"{task_class.__name__} sets no {attribute} ({wanted})")
    value = getattr(task_class, attribute)
    if not good(value):
        raise TypeError(f"{task_class.__name__}.{attribute} must be {wanted}, got {value!r}")


TASK_PLUGINS = PluginKind("task", ENTRY_POINT_GROUP, "register_tasks", _accept, PluginWarning)


class Registry:
    """The tasks provided by a set of plugins (by default, every installed entry point)."""

    def __init__(self, plugins: Iterable[EntryPoint] | None = None):
        self._table = PluginTable(TASK_PLUGINS, plugins)

    def tasks(self) -> list[TaskInfo]:
        return sorted(self._table.items(), key=lambda info: info.name)

    def info(self, name: str) -> TaskInfo:
        available = ", ".join(info.name for info in self.tasks()) or "none installed"
        return self._table.find(name, TaskError, f"unknown task {name!r}; available tasks: {available}")

    def get(self, name: str, **params: Any) -> Task:
        """Task `name` built with `params` (Python values or strings), checked against its Params."""
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
