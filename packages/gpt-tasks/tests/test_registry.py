"""The registry: discovery, parameter validation, and contained plugin failures."""

from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint, version

import pytest

import gpt_tasks
from gpt_core import deprecation, plugins
from gpt_tasks import ENTRY_POINT_GROUP, ParamError, PluginWarning, Registry, TaskError, get_task, list_tasks
from gpt_tasks.builtin.sort import SortTask

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


# the first release's contract ------------------------------------------------------------------------
@pytest.fixture
def fresh_deprecations(monkeypatch):
    """Every deprecated name warns again, as in a new process."""
    monkeypatch.setattr(deprecation, "_warned", set())


def test_the_task_marker_of_gpt_tasks_is_the_one_marker():
    assert gpt_tasks.hookimpl is plugins.hookimpl
    assert gpt_tasks.hookspec is plugins.hookspec


@pytest.mark.parametrize(
    "marker",
    ["from gpt_tasks import hookimpl", "from gpt_tasks.hooks import hookimpl"],
    ids=["gpt_tasks", "gpt_tasks.hooks"],
)
def test_a_plugin_importing_the_first_releases_task_marker_loads(plugin, marker):
    source = TASK_MODULE.format(cls="Task_", name="old_import", body="register(Task_)")
    registry = Registry(
        plugins=[plugin("gt_old_import", source.replace("from gpt_core.plugins import hookimpl", marker))]
    )
    assert [info.name for info in registry.tasks()] == ["old_import"]


def test_a_hook_marked_with_the_first_releases_project_name_loads_and_warns_once(plugin, fresh_deprecations):
    old_marker = "import pluggy\nhookimpl = pluggy.HookimplMarker('gpt_tasks')"
    source = TASK_MODULE.format(cls="Task_", name="old_project", body="register(Task_)")
    old = plugin("gt_old_project", source.replace("from gpt_core.plugins import hookimpl", old_marker))
    with pytest.warns(DeprecationWarning, match=r"HookimplMarker\('gpt_tasks'\).*use gpt_core.plugins.hookimpl"):
        registry = Registry(plugins=[old])
    assert [info.name for info in registry.tasks()] == ["old_project"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Registry(plugins=[old])  # the same plugin loaded again: no second warning


def test_train_defaults_warns_once_naming_defaults(fresh_deprecations):
    with pytest.warns(DeprecationWarning, match=r"gpt_tasks.TrainDefaults is deprecated.*use gpt_tasks.Defaults"):
        first = gpt_tasks.TrainDefaults
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpt_tasks.TrainDefaults is first
    with pytest.warns(DeprecationWarning, match=r"gpt_tasks.task.TrainDefaults is deprecated"):
        from gpt_tasks.task import TrainDefaults
    assert TrainDefaults is first


def test_a_task_returning_train_defaults_gets_the_defaults_it_stands_for(fresh_deprecations):
    with pytest.warns(DeprecationWarning):
        TrainDefaults = gpt_tasks.TrainDefaults

    class FirstReleaseSort(SortTask):
        def defaults(self):
            model = {"n_layer": 3, "n_head": 2, "n_embd": 32, "dropout": 0.0, "pos": "rope", "vocab_size": 99}
            return TrainDefaults(model=model, steps=400, lr=3e-3, min_lr=3e-4, betas=(0.8, 0.95), eval_limit=500)

    task = FirstReleaseSort(SortTask.Params(length=4))
    defaults = task.defaults()
    assert isinstance(defaults, gpt_tasks.Defaults)
    model = defaults.model
    assert (model.n_layer, model.n_head, model.n_embd, model.pos) == (3, 2, 32, "rope")
    assert (model.vocab_size, model.block_size) == (task.vocab_size, task.block_size)  # the task's, always
    train = defaults.train
    assert (train.steps, train.lr, train.min_lr, train.eval_limit) == (400, 3e-3, 3e-4, 500)
    assert (train.beta1, train.beta2) == (0.8, 0.95)
    assert (train.batch_size, train.warmup_steps, train.grad_clip) == (64, 100, 1.0)  # TrainDefaults' own defaults


def test_the_first_releases_hook_module_names_warn_naming_gpt_core_plugins(fresh_deprecations):
    from gpt_tasks import hooks

    with pytest.warns(DeprecationWarning, match=r"gpt_tasks.hooks.TaskSpecs .* use gpt_core.plugins.PluginSpecs"):
        assert hooks.TaskSpecs is plugins.PluginSpecs
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        hooks.nothing  # noqa: B018


def test_a_plugin_needing_a_newer_contract_can_refuse_in_one_warning(plugin):
    needs_3 = "from gpt_core.plugins import API_VERSION\nif API_VERSION < 3:\n    raise ImportError('needs API 3')\n"
    good = task_plugin(plugin, "gt_good_d", "good_d")
    assert plugins.API_VERSION == 2
    with pytest.warns(PluginWarning, match=r"'gt_needs_3'.*failed to load: ImportError: needs API 3"):
        registry = Registry(plugins=[plugin("gt_needs_3", needs_3), good])
    assert [info.name for info in registry.tasks()] == ["good_d"]
