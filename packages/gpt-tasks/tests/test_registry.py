"""The registry: discovery, parameter validation, and contained plugin failures."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, version

import pytest

from gpt_core import plugins
from gpt_tasks import ENTRY_POINT_GROUP, ParamError, PluginWarning, Registry, TaskError, get_task, list_tasks

BUILTINS = {"sort", "addition", "modadd", "shakespeare", "text", "repeats"}


@pytest.fixture
def plugin(tmp_path):
    """plugin(module_name, source) -> an EntryPoint for a module written into tmp_path."""
    with plugins.plugin_modules(tmp_path, ENTRY_POINT_GROUP) as make:
        yield make


TASK_MODULE = """
from gpt_core.plugins import hookimpl
from gpt_tasks.builtin.sort import SortTask


class {cls}(SortTask):
    name = {name!r}


@hookimpl
def register_tasks(register):
    {body}
"""


def task_plugin(plugin, module: str, task_name: str, body: str = "register(Task_)") -> EntryPoint:
    return plugin(module, TASK_MODULE.format(cls="Task_", name=task_name, body=body))


def test_builtin_tasks_are_listed_with_their_plugin_distribution_and_version():
    infos = {info.name: info for info in list_tasks()}
    assert set(infos) >= BUILTINS
    for name in BUILTINS:
        assert (infos[name].plugin, infos[name].distribution) == ("builtin", "gpt-tasks")
        assert infos[name].version == version("gpt-tasks")
        assert infos[name].description


def test_get_task_builds_sort_with_the_given_parameters():
    task = get_task("sort", length=8)
    assert task.params.length == 8
    assert task.block_size == 15


def test_unknown_parameter_is_refused_listing_the_known_ones():
    with pytest.raises(ParamError, match="lenght") as error:
        get_task("sort", lenght=8)
    assert "known: heldout_fraction, length, min_length, separator, vocab" in str(error.value)


def test_wrongly_typed_parameter_is_refused():
    with pytest.raises(ParamError, match="length must be an integer, got 'eight'"):
        get_task("sort", length="eight")
    with pytest.raises(ParamError, match="reverse must be true or false"):
        get_task("addition", reverse="maybe")


def test_command_line_strings_are_coerced_to_the_declared_types():
    assert get_task("sort", length="8").params.length == 8
    task = get_task("addition", digits="2", reverse="false", heldout_fraction="0.2")
    assert (task.params.digits, task.params.reverse, task.params.heldout_fraction) == (2, False, 0.2)
    assert get_task("addition", digits="2", reverse="true").params.reverse is True


def test_invalid_value_is_refused_with_the_reason():
    with pytest.raises(ParamError, match="length must be at least 2, got 1"):
        get_task("sort", length=1)
    with pytest.raises(ParamError, match="train_fraction must be in"):
        get_task("modadd", train_fraction=1.5)


def test_unknown_task_lists_the_available_ones():
    with pytest.raises(TaskError, match="unknown task 'sorting'") as error:
        get_task("sorting")
    assert "addition, modadd" in str(error.value) and "sort" in str(error.value)


def test_two_plugins_claiming_one_name_make_it_an_error_naming_both(plugin):
    first = task_plugin(plugin, "gt_dup_first", "dup")
    second = task_plugin(plugin, "gt_dup_second", "dup")
    other = task_plugin(plugin, "gt_dup_other", "fine")
    with pytest.warns(PluginWarning, match="'dup' is registered by both"):
        registry = Registry(plugins=[first, second, other])
    with pytest.raises(TaskError, match="gt_dup_first") as error:
        registry.info("dup")
    assert "gt_dup_second" in str(error.value)
    assert [info.name for info in registry.tasks()] == ["fine"]  # only the contested name is lost


def test_two_plugins_whose_entry_points_share_a_name_both_load(plugin):
    """Entry point names are unique within a distribution only: a third party's `builtin` took gpt-tasks' down."""
    first, second = task_plugin(plugin, "gt_same_a", "same_a"), task_plugin(plugin, "gt_same_b", "same_b")
    same = [EntryPoint(name="builtin", value=ep.value, group=ep.group) for ep in (first, second)]
    assert [info.name for info in Registry(plugins=same).tasks()] == ["same_a", "same_b"]


def test_a_plugin_marking_no_hook_of_its_group_is_reported(plugin):
    misnamed = plugin("gt_misnamed", TASK_MODULE.format(cls="Task_", name="x", body="register(Task_)").replace(
        "def register_tasks", "def register_task"))  # fmt: skip
    with pytest.warns(PluginWarning, match=r"'gt_misnamed'.*registers nothing.*marks no register_tasks"):
        registry = Registry(plugins=[misnamed, task_plugin(plugin, "gt_good_e", "good_e")])
    assert [info.name for info in registry.tasks()] == ["good_e"]


def test_plugin_that_fails_to_import_is_reported_and_the_others_still_work(plugin):
    broken = plugin("gt_broken_import", "raise RuntimeError('boom at import')\n")
    good = task_plugin(plugin, "gt_good_a", "good_a")
    with pytest.warns(PluginWarning, match=r"'gt_broken_import'.*failed to load: RuntimeError: boom at import"):
        registry = Registry(plugins=[broken, good])
    assert [info.name for info in registry.tasks()] == ["good_a"]
    assert registry.get("good_a", length=3).params.length == 3


def test_plugin_whose_register_raises_has_its_partial_registrations_dropped(plugin):
    body = "register(Task_)\n    raise ValueError('half way')"
    failing = task_plugin(plugin, "gt_half_registered", "half", body=body)
    good = task_plugin(plugin, "gt_good_b", "good_b")
    with pytest.warns(PluginWarning, match=r"'gt_half_registered'.*failed to register its tasks: ValueError: half way"):
        registry = Registry(plugins=[failing, good])
    assert [info.name for info in registry.tasks()] == ["good_b"]
    with pytest.raises(TaskError, match="unknown task 'half'"):
        registry.info("half")


def test_a_plugin_that_exits_is_reported_and_the_others_still_work(plugin):
    """sys.exit is a BaseException, not an Exception: it ended every command (and a Python program listing tasks)."""
    at_import = plugin("gt_exits_at_import", "import sys\nsys.exit(0)\n")
    at_register = task_plugin(plugin, "gt_exits_registering", "exits", body="raise SystemExit(3)")
    good = task_plugin(plugin, "gt_good_x", "good_x")
    with pytest.warns(PluginWarning) as warned:
        registry = Registry(plugins=[at_import, at_register, good])
    said = [str(warning.message) for warning in warned]
    assert any(re.search(r"'gt_exits_at_import'.*failed to load: it called sys.exit\(0\)$", text) for text in said)
    assert any(
        re.search(r"'gt_exits_registering'.*register its tasks: it called sys.exit\(3\)$", text) for text in said
    )
    assert [info.name for info in registry.tasks()] == ["good_x"]


def test_registering_something_that_is_not_a_task_is_reported(plugin):
    not_a_task = task_plugin(plugin, "gt_not_a_task", "unused", body="register(int)")
    good = task_plugin(plugin, "gt_good_c", "good_c")
    with pytest.warns(PluginWarning, match=r"'gt_not_a_task'.*register\(\) takes a gpt_tasks.Task subclass"):
        registry = Registry(plugins=[not_a_task, good])
    assert [info.name for info in registry.tasks()] == ["good_c"]


def test_plugins_without_a_distribution_are_reported_as_unknown(plugin):
    registry = Registry(plugins=[task_plugin(plugin, "gt_loose_module", "loose")])
    info = registry.info("loose")
    assert (info.plugin, info.distribution, info.version) == ("gt_loose_module", "unknown", "unknown")


# the contract's version ----------------------------------------------------------------------------
def test_a_plugin_needing_a_newer_contract_can_refuse_in_one_warning(plugin):
    needs_2 = "from gpt_core.plugins import API_VERSION\nif API_VERSION < 2:\n    raise ImportError('needs API 2')\n"
    good = task_plugin(plugin, "gt_good_d", "good_d")
    assert plugins.API_VERSION == 1
    with pytest.warns(PluginWarning, match=r"'gt_needs_2'.*failed to load: ImportError: needs API 2"):
        registry = Registry(plugins=[plugin("gt_needs_2", needs_2), good])
    assert [info.name for info in registry.tasks()] == ["good_d"]


BROKEN_TASKS = """
import dataclasses
from gpt_core.plugins import hookimpl
from gpt_tasks import Task
from gpt_tasks.builtin.sort import SortTask


class Unwritten(Task):  # none of the abstract members
    name = "unwritten"


class NotDataclass(SortTask):
    name = "not_dataclass"
    Params = dict


@dataclasses.dataclass(frozen=True)
class Required:
    length: int


class NoDefault(SortTask):
    name = "no_default"
    Params = Required


class Slashed(SortTask):
    name = "my/slash"


class FixesNothing(SortTask):
    name = "fixes_nothing"
    eval_fixed = ("holdout",)


@hookimpl
def register_tasks(register):
    register({task})
"""


@pytest.mark.parametrize(
    ("task", "said"),
    [
        (
            "Unwritten",
            "Unwritten leaves attention_examples, batch, block_size, defaults, evaluate, example_prompts unwritten",
        ),
        ("NotDataclass", "NotDataclass.Params must be a dataclass"),
        ("NoDefault", "NoDefault.Params has fields without a default: length"),
        ("Slashed", "Slashed.name must be letters, digits, '_', '.' or '-' (a run's folder), got 'my/slash'"),
        ("FixesNothing", "FixesNothing.eval_fixed names holdout, not fields of its Params"),
    ],
)
def test_a_task_breaking_the_contract_is_refused_when_it_registers(plugin, task, said):
    """Each surfaced later as a traceback: building the task, naming the run's folder, or not guarding eval --set."""
    broken = plugin(f"gt_broken_{task.lower()}", BROKEN_TASKS.format(task=task))
    with pytest.warns(PluginWarning, match=re.escape(said)):
        registry = Registry(plugins=[broken, task_plugin(plugin, f"gt_good_{task.lower()}", "good")])
    assert [info.name for info in registry.tasks()] == ["good"]
