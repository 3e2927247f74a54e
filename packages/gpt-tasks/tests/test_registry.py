"""The registry: discovery, parameter validation, and contained plugin failures."""

from __future__ import annotations

import re
import warnings
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


# the contract's class attributes and Params' types ---------------------------------------------------
CONTRACT_TASKS = """
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from gpt_core.plugins import hookimpl
from gpt_tasks import Task
from gpt_tasks.builtin.sort import SortParams, SortTask

if TYPE_CHECKING:
    from gt_nowhere import Shape


class NoPrimary(Task):  # every member written but primary_metric, which Task leaves to each task
    name = "no_primary"
    Params = SortParams
    block_size = 4
    batch = evaluate = defaults = example_prompts = attention_examples = lambda self, *args: None


class EmptyPrimary(SortTask):
    name = "empty_primary"
    primary_metric = ""


class TestSplit(SortTask):
    name = "test_split"
    eval_splits = ("test",)


class TrainOnly(SortTask):
    name = "train_only"
    eval_splits = ("train",)


class SplitList(SortTask):
    name = "split_list"
    eval_splits = ["heldout"]


class HigherString(SortTask):
    name = "higher_string"
    higher_is_better = "no"


class DescribedByProperty(SortTask):
    name = "described_by_property"
    description = property(lambda self: "computed")


@dataclasses.dataclass(frozen=True)
class Unresolved:
    length: int = 4
    heldout_fraction: float = 0.25
    shape: Shape | None = None


class UnresolvedParams(SortTask):
    name = "unresolved_params"
    eval_fixed = ("heldout_fraction",)  # its Params has no vocab nor separator
    Params = Unresolved


@dataclasses.dataclass(frozen=True)
class Weighted:
    length: int = 4
    heldout_fraction: float = 0.25
    weights: tuple[int, ...] = (1, 2)


class TupleParams(SortTask):
    name = "tuple_params"
    eval_fixed = ("heldout_fraction",)  # its Params has no vocab nor separator
    Params = Weighted


@hookimpl
def register_tasks(register):
    register({task})
"""


@pytest.fixture
def contract_plugin(plugin):
    """contract_plugin(task) -> (an entry point registering CONTRACT_TASKS' `task`, one registering a good task)."""

    def make(task: str) -> tuple[EntryPoint, EntryPoint]:
        broken = plugin(f"gt_contract_{task.lower()}", CONTRACT_TASKS.format(task=task))
        return broken, task_plugin(plugin, f"gt_fine_{task.lower()}", "fine")

    return make


@pytest.mark.parametrize(
    ("task", "said"),
    [
        ("NoPrimary", "task 'no_primary': NoPrimary sets no primary_metric (a key of evaluate()'s metrics)"),
        ("EmptyPrimary", "EmptyPrimary.primary_metric must be a key of evaluate()'s metrics, got ''"),
        ("TestSplit", "TestSplit.eval_splits must be ('heldout',) or ('train', 'heldout')"),
        ("TrainOnly", "TrainOnly.eval_splits must be ('heldout',) or ('train', 'heldout')"),
        ("SplitList", "SplitList.eval_splits must be ('heldout',) or ('train', 'heldout')"),
        ("HigherString", "task 'higher_string': HigherString.higher_is_better must be True or False, got 'no'"),
        ("DescribedByProperty", "DescribedByProperty.description must be a str, one line for `gpt-train tasks`"),
    ],
)
def test_a_task_whose_class_attributes_would_fail_after_training_started_is_refused_when_it_registers(
    contract_plugin, task, said
):
    """Each gave a traceback: no primary_metric at the run's start, a split but heldout at the first evaluation after
    config.json and a checkpoint were written, higher_is_better 'no' when config.json was read back by eval, a
    description property in `gpt-train tasks --json`."""
    broken, fine = contract_plugin(task)
    with pytest.warns(PluginWarning) as warned:
        registry = Registry(plugins=[broken, fine])
    (message,) = [str(warning.message) for warning in warned]
    assert said in message and "\n" not in message
    assert [info.name for info in registry.tasks()] == ["fine"]


@pytest.mark.parametrize(
    ("task", "said"),
    [
        (  # a type imported under TYPE_CHECKING alone: get_type_hints raised NameError as the run parsed --set
            "UnresolvedParams",
            "task 'unresolved_params': UnresolvedParams.Params's annotations do not resolve (NameError: name 'Shape' "
            "is not defined): a type a field names must be importable when the plugin runs, not only under "
            "TYPE_CHECKING",
        ),
        (  # tuple[int, ...]: its default trained, then eval, sample and --resume refused the run's own config.json
            "TupleParams",
            "task 'tuple_params': TupleParams.Params field 'weights' is tuple[int, ...], which --set and config.json "
            "cannot give: a task parameter is int, float, bool, str, a Literal of those, or one of them | None",
        ),
    ],
    ids=["unresolved annotation", "unsupported type"],
)
def test_params_a_run_could_not_read_back_are_refused_when_it_registers(contract_plugin, task, said):
    broken, fine = contract_plugin(task)
    with pytest.warns(PluginWarning, match=re.escape(said)):
        registry = Registry(plugins=[broken, fine])
    assert [info.name for info in registry.tasks()] == ["fine"]


@pytest.mark.parametrize(
    ("annotation", "supported"),
    [
        ("int", True),
        ("float | None", True),
        ("typing.Literal[1, 2, 4]", True),
        ("typing.Literal['a', 1, 0.5, True, None] | None", True),
        ("tuple[int, ...]", False),
        ("list[str]", False),
        ("int | str", False),  # coerce would read it as int alone, and "none" as None
        ("typing.Literal[b'x']", False),
        ("dict", False),
    ],
)
def test_the_registry_accepts_exactly_the_parameter_types_coerce_reads(annotation, supported):
    import typing

    from gpt_tasks import ParamError, coerce
    from gpt_tasks.params import supported_type

    hint = eval(annotation, {"typing": typing})
    assert supported_type(hint) is supported
    if not supported:
        with pytest.raises(ParamError, match="unsupported parameter type"):
            coerce("field", "1", hint)


def test_every_builtin_task_registers_without_a_warning():
    """The contract's checks read the Task base class's defaults: a built-in relying on one is not refused."""
    builtin = EntryPoint(name="builtin", value="gpt_tasks.builtin", group=ENTRY_POINT_GROUP)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginWarning)
        assert {info.name for info in Registry(plugins=[builtin]).tasks()} == BUILTINS


def test_a_plugin_registering_a_task_twice_is_told_so_in_one_warning(plugin):
    """It read "task 'twice' is registered by both plugin 'gt_twice' (...) and plugin 'gt_twice' (...)"."""
    twice = task_plugin(plugin, "gt_twice", "twice", body="register(Task_)\n    register(Task_)")
    with pytest.warns(PluginWarning) as warned:
        registry = Registry(plugins=[twice, task_plugin(plugin, "gt_once", "once")])
    assert [str(warning.message) for warning in warned] == [
        "task plugin 'gt_twice' (unknown) failed to register its tasks: it registers task 'twice' twice"
    ]
    assert [info.name for info in registry.tasks()] == ["once"]


# Literal parameters ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("annotation", "given", "expected"),
    [
        ("typing.Literal[1, 2, 4]", "4", 4),
        ("typing.Literal[1, 2, 4]", 4, 4),
        ("typing.Literal[1, 2, 4] | None", "2", 2),
        ("typing.Literal[1, 2, 4] | None", "none", None),
        ("typing.Literal[0.5, 1.0]", "0.5", 0.5),
        ("typing.Literal[0.5, 1.0]", "1", 1.0),
        ("typing.Literal[True]", "yes", True),
        ("typing.Literal['1', 1]", "1", "1"),  # a string choice spelt exactly is the string
        ("typing.Literal['char', 'bpe']", "bpe", "bpe"),
    ],
)
def test_a_literal_of_numbers_or_bools_is_set_from_its_command_line_spelling(annotation, given, expected):
    """`--set width=4` for `width: Literal[1, 2, 4]` compared the string '4' with the numbers and was refused."""
    import typing

    from gpt_tasks import coerce

    got = coerce("width", given, eval(annotation, {"typing": typing}))
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("annotation", "given"),
    [("typing.Literal[1, 2, 4]", "3"), ("typing.Literal[1, 2, 4]", True), ("typing.Literal[1, 2]", "1.0")],
)
def test_a_literal_refuses_what_is_none_of_its_choices(annotation, given):
    import typing

    from gpt_tasks import coerce

    with pytest.raises(ParamError, match=r"width must be one of 1, 2"):
        coerce("width", given, eval(annotation, {"typing": typing}))


def test_the_builtin_tasks_declare_which_metrics_count_examples():
    """gpt-train's summary counts wrong examples from these alone: a token accuracy is a share of tokens."""
    declared = {info.name: info.task_class.per_example_metrics for info in list_tasks() if info.name in BUILTINS}
    assert declared == {
        "sort": ("exact_match",),
        "addition": ("exact_match",),
        "modadd": ("accuracy",),  # one answer token a pair
        "repeats": (),  # copy_accuracy: a share of the repeated tokens
        "shakespeare": (),
        "text": (),
    }
