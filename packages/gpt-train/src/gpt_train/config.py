"""A run's resolved configuration: the task's defaults with the user's values (routed by `route`, checked by the
type owning each field) laid over. config.json holds all of it, so eval, sample and --resume rebuild the same run."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import torch

from gpt_core import GPTConfig
from gpt_tasks import (
    ParamError,
    Task,
    TaskError,
    build_params,
    coerce,
    default_registry,
    field_types,
    get_task,
)
from gpt_tasks.builtin.text import TextParams, TextTask, TextVocabulary
from gpt_train.errors import TrainError, message_of
from gpt_train.files import write_json_atomically
from gpt_train.hf import pretrained_model_config, tokenizer_params
from gpt_train.kernels import kernel_versions
from gpt_train.settings import TrainSettings
from gpt_viz import HELDOUT, RunLayout, metric_key

TASK_FIXED_MODEL_FIELDS = ("vocab_size", "block_size")  # decided by the task, not settable
SCOPES = ("task", "model", "train")
T = TypeVar("T")


class ConfigError(TrainError):
    """A setting that is unknown, of the wrong type or out of range, or a run configuration that cannot be read."""


@dataclass(frozen=True)
class RunConfig:
    task: str
    task_params: dict[str, Any]
    model: GPTConfig
    train: TrainSettings
    primary_metric: str
    higher_is_better: bool
    eval_splits: tuple[str, ...] = (HELDOUT,)
    versions: dict[str, str] = field(default_factory=dict)
    task_files: tuple[str, ...] = ()  # task parameters naming a file kept in the run directory (Task.files())
    kernels: dict[str, str] = field(default_factory=dict)  # slot -> a registered name or module:function
    unverified_kernels: tuple[str, ...] = ()  # `run --unverified`
    kernel_folders: dict[str, str] = field(default_factory=dict)  # a module-path kernel's folder, run-relative
    init_from: str = ""  # the GPT-2 directory of `run --init-from`

    def save(self, run_dir: Path) -> None:
        write_json_atomically(RunLayout(run_dir).config, dataclasses.asdict(self))  # tuples are written as lists

    @classmethod
    def load(cls, run_dir: Path) -> RunConfig:
        path = RunLayout(run_dir).config
        if not path.is_file():
            raise ConfigError(f"{run_dir} is not a run directory (no {path.name})")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            _check_json_types(data)
            for f in dataclasses.fields(cls):
                if f.name not in data and f.default is f.default_factory is dataclasses.MISSING:  # a required field
                    raise ValueError(f"it has no {f.name!r}")
            given = {key: tuple(v) if isinstance(v, list) else v for key, v in data.items() if key in JSON_TYPES}
            kept = {name: str(RunLayout(run_dir).task_file(name)) for name in given.get("task_files", ())}
            built = {
                "task_params": data["task_params"] | kept,
                "model": GPTConfig.from_dict(data["model"]),
                "train": build_params(TrainSettings, data["train"], what="training setting"),
                "eval_splits": tuple(data["eval_splits"]),
            }
            unnamed = sorted(set(given.get("unverified_kernels", ())) - set(given.get("kernels", {})))
            if unnamed:
                raise ValueError(f"unverified_kernels names {', '.join(unnamed)}, which kernels does not")
            return cls(**given | built)
        except (ValueError, KeyError, TypeError, OSError) as error:
            raise ConfigError(f"{path} is not a valid run configuration ({error})") from None

    def build_task(self, overrides: dict[str, Any] | None = None) -> Task:
        """The run's task, checked against its model's size, or with `overrides` another of its kind: one whose
        block may differ (longer sequences), but not its vocabulary, whose ids the model has learned."""
        fixed = sorted(set(overrides or {}) & set(task_class(self.task).eval_fixed))
        if fixed:
            raise ConfigError(
                f"eval --set cannot change {', '.join(fixed)} of a trained {self.task} run: it decides which "
                "examples are held out or what the token ids mean"
            )
        task = make_task(self.task, self.task_params | (overrides or {}))
        made = {key: getattr(self.model, key) for key in TASK_FIXED_MODEL_FIELDS}
        found = {key: getattr(task, key) for key in TASK_FIXED_MODEL_FIELDS}
        if overrides and found["vocab_size"] != made["vocab_size"]:
            raise ConfigError(
                f"--set {', '.join(f'{key}={value}' for key, value in overrides.items())} gives the {self.task} task "
                f"a vocabulary of {found['vocab_size']:,} tokens, and the model learned one of {made['vocab_size']:,}: "
                "keep the vocabulary it was trained on"
            )
        if not overrides and found != made:
            sizes = lambda values: ", ".join(f"{key} {value:,}" for key, value in values.items())
            raise ConfigError(
                f"config.json's task parameters make a {self.task} task of {sizes(found)}, but its model was made "
                f"for {sizes(made)}"
            )
        return task

    def build_sampler(self) -> Task | TextVocabulary:
        """What `sample` encodes with: the task, or the recorded tokenizer of a text run whose corpus cannot be read
        as it was trained on (gone, moved, changed, never downloaded here)."""
        try:
            return self.build_task()
        except ConfigError as error:
            if not issubclass(task_class(self.task), TextTask):
                raise
            problem = str(error)
        try:
            vocabulary = TextVocabulary(build_params(TextParams, self.task_params))
        except (ParamError, ValueError):
            raise ConfigError(problem) from None
        warnings.warn(f"{problem}; sampling with the tokenizer the run recorded", stacklevel=2)
        return vocabulary


def task_class(name: str) -> type[Task]:
    try:
        return default_registry().info(name).task_class
    except TaskError as error:
        raise ConfigError(message_of(error)) from None


def make_task(name: str, params: dict[str, Any]) -> Task:
    try:
        return get_task(name, **params)
    except (TaskError, ParamError) as error:
        raise ConfigError(message_of(error)) from None
    except (ValueError, OSError) as error:  # the task's own construction: a missing data file, say
        raise ConfigError(f"task {name!r}: {error}") from None


def parse_assignments(pairs: tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        parsed[key.strip()] = value.strip()  # a key given again: the last value, as for a repeated flag
    return parsed


def route(values: dict[str, Any], task_type: type[Task]) -> dict[str, dict[str, Any]]:
    """Send each value (`length`, or prefixed: `task.length`) to the task, the model or the training settings (a
    dict by scope); the one check for unknown keys, and for a key two scopes share (a plugin task's `seed`), which
    must be prefixed. A task's `data` and `cache_dir` paths are made absolute: eval and sample may run from another
    directory."""
    names = {
        "task": set(field_types(task_type.Params)),
        "model": set(field_types(GPTConfig)) - set(TASK_FIXED_MODEL_FIELDS),
        "train": set(field_types(TrainSettings)),
    }
    routed: dict[str, dict[str, Any]] = {scope: {} for scope in SCOPES}
    given_as: dict[tuple[str, str], str] = {}  # the key that set each (scope, name)

    def put(scope: str, name: str, key: str, value: Any) -> None:
        if (scope, name) in given_as:
            raise ConfigError(f"--set {given_as[scope, name]} and --set {key} both set {scope}.{name}; give it once")
        given_as[scope, name], routed[scope][name] = key, value

    for key, value in values.items():
        scope, dot, name = key.partition(".")
        if dot and scope in names:
            if name not in names[scope]:
                raise ConfigError(f"unknown --set key {key!r}; {scope} keys: {', '.join(sorted(names[scope]))}")
            put(scope, name, key, value)
            continue
        owners = [s for s in SCOPES if key in names[s]]
        if not owners:
            known = ", ".join(sorted(set().union(*names.values())))
            raise ConfigError(f"unknown --set key {key!r}; known keys: {known}")
        if len(owners) > 1:
            raise ConfigError(
                f"--set {key} is both a {' and a '.join(owners)} key: write {' or '.join(f'{s}.{key}' for s in owners)}"
            )
        put(owners[0], key, key, value)
    for name in ("data", "cache_dir"):  # a task's paths, made absolute: eval and sample may run elsewhere
        if isinstance(routed["task"].get(name), str) and routed["task"][name]:
            routed["task"][name] = str(Path(routed["task"][name]).expanduser().absolute())
    return routed


def route_data(task_name: str, data: Path | None) -> dict[str, Any]:
    if data is None:
        return {}
    if "data" not in field_types(task_class(task_name).Params):
        raise ConfigError(f"task {task_name!r} reads no data file; drop --data")
    return {"task.data": str(data)}  # made absolute by `route`


def _json_type(hint: Any) -> tuple[type, type | None]:
    origin = get_origin(hint) or hint
    kind = {tuple: list, GPTConfig: dict, TrainSettings: dict}.get(origin, origin)
    items = [arg for arg in get_args(hint) if arg is not Ellipsis]
    return kind, items[-1] if items and items[-1] is not Any else None


JSON_TYPES = {name: _json_type(hint) for name, hint in get_type_hints(RunConfig).items()}  # (type, item type)
JSON_NAMES = {dict: "a mapping", list: "a list", str: "a string", bool: "true or false"}
JSON_PLURALS = {dict: "mappings", list: "lists", str: "strings", bool: "true or false values"}


def _check_json_types(data: Any) -> None:
    if not isinstance(data, dict):
        raise ValueError(f"it holds {type(data).__name__}, not a mapping")
    for key, (kind, item) in JSON_TYPES.items():
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, kind):
            raise ValueError(f"{key} must be {JSON_NAMES[kind]}, got {json.dumps(value)[:40]}")
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        if item is not None and not all(isinstance(each, item) for each in items):
            raise ValueError(f"{key} must hold {JSON_PLURALS[item]} only, got {json.dumps(value)[:60]}")
    types = field_types(GPTConfig)
    for key, value in data.get("model", {}).items():
        kind = types.get(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (
            (kind is bool and not isinstance(value, bool))
            or (kind is int and not (number and isinstance(value, int)))
            or (kind is float and not number)
            or (get_origin(kind) is Literal and value not in get_args(kind))
        ):
            raise ValueError(
                f"model setting {key} must be {getattr(kind, '__name__', kind)}, got {json.dumps(value)[:40]}"
            )


def override(instance: T, values: dict[str, Any], what: str) -> T:
    """`instance` with `values` in its fields, each coerced to its declared type and checked by the type."""
    types = field_types(type(instance))
    try:
        return dataclasses.replace(instance, **{key: coerce(key, value, types[key]) for key, value in values.items()})
    except (ParamError, ValueError, TypeError) as error:
        raise ConfigError(f"invalid {what}: {error}") from None


def resolve_run_config(
    task_name: str,
    values: dict[str, Any],
    kernels: dict[str, str] | None = None,
    unverified: bool = False,
    init_from: Path | None = None,
) -> tuple[RunConfig, Task]:
    """The task's defaults with the user's `values` and `kernels` laid over (`init_from`: a GPT-2's shape and
    tokenizer); the configuration and the task, built once (building can hash a whole split)."""
    routed = route(values, task_class(task_name))
    if init_from is not None:
        routed["task"].update(tokenizer_params(init_from, task_class(task_name).Params, routed["task"]))
    task = make_task(task_name, routed["task"])
    try:
        defaults = task.defaults()
    except (ValueError, TypeError) as error:  # a plugin's model shape that GPTConfig refuses, say
        raise ConfigError(f"task {task_name!r}: its defaults() raised {type(error).__name__}: {error}") from None
    model = defaults.model
    shape = {"vocab_size": task.vocab_size, "block_size": task.block_size}  # the task's, whatever defaults say
    if init_from is not None:
        model = pretrained_model_config(init_from, task.vocab_size, task.block_size, routed["model"])
    _check_task_min_lr(task_name, defaults.train, routed["train"])
    train = override(train_settings(task_name, defaults.train), routed["train"], "training setting")
    if "cooldown_trigger" in routed["train"] and train.cooldown_trigger > 0 and not train.cooldown_steps:
        raise ConfigError(
            "cooldown_trigger starts a cool-down of cooldown_steps steps, and cooldown_steps is 0: give it too "
            "(with schedule=constant)"
        )
    model = override(model, routed["model"] | shape, "model shape")
    _check_given_settings_act(routed["train"], train, model)
    task_files = tuple(sorted(task.files()))
    config = RunConfig(
        task=task_name,
        task_params=dataclasses.asdict(task.params) | {name: RunLayout.task_file_name(name) for name in task_files},
        model=model,
        train=train,
        primary_metric=metric_key(HELDOUT, task.primary_metric),
        higher_is_better=task.higher_is_better,
        eval_splits=tuple(task.eval_splits),
        versions=installed_versions() | task_version(task_name) | kernel_versions(kernels or {}),
        task_files=task_files,
        kernels=dict(kernels or {}),
        unverified_kernels=tuple(sorted(kernels or {})) if unverified else (),
        init_from=str(init_from.absolute()) if init_from is not None else "",
    )
    check_float_range(config)
    return config, task


def _check_given_settings_act(given: dict[str, Any], train: TrainSettings, model: GPTConfig) -> None:
    """A training setting the user gave that the run would never read, refused: it trained as if it were unset."""
    unread = {
        "grokfast_alpha": (train.grokfast_lambda == 0, "weighs Grokfast's gradient average, and grokfast_lambda is 0 "
                           "(Grokfast off): give grokfast_lambda above 0 too"),
        "decay_position_embedding": (train.decay_position_embedding and model.pos != "learned",
                                     f"decays the learned position table, and pos={model.pos} has none"),
        "early_eval_every": (train.early_eval_every >= train.eval_every,
                             f"adds evaluations between eval_every's ({train.eval_every}): give one below it"),
        "early_eval_until": (train.early_eval_until > 0 and not 0 < train.early_eval_every < train.eval_every,
                             "ends the early evaluations, and early_eval_every (below eval_every) sets none"),
    }  # fmt: skip
    for name, (never_read, why) in unread.items():
        if name in given and never_read:
            raise ConfigError(f"{name} {why}")


def _check_task_min_lr(task_name: str, defaults: dict[str, Any], given: dict[str, Any]) -> None:
    """A given lr below the default min_lr (the task's, else TrainSettings'), named as such: the user never set it."""
    if "lr" not in given or "min_lr" in given:
        return
    try:
        lr = float(given["lr"])
    except (TypeError, ValueError):
        return  # `override` says what is wrong with it
    whose, min_lr = (
        (f"the {task_name} task's", defaults["min_lr"]) if "min_lr" in defaults else ("the", TrainSettings.min_lr)
    )
    if 0 < lr < min_lr:  # lr <= 0: `override` refuses it as such
        raise ConfigError(
            f"lr {lr:g} is below {whose} default min_lr {min_lr:g}, the rate its schedule ends at: give one too, "
            f"e.g. --set min_lr={lr / 10:g}"
        )


def train_settings(task_name: str, overrides: dict[str, Any]) -> TrainSettings:
    try:
        return build_params(TrainSettings, overrides, what="training setting")
    except ParamError as error:
        raise ConfigError(f"task {task_name!r}, in its defaults().train: {error}") from None


def check_float_range(config: RunConfig) -> None:
    """Every float setting within float32's range, the weights' and optimiser state's whatever `dtype`."""
    finite = torch.finfo(torch.float32)
    for settings in (config.model, config.train):
        for f in dataclasses.fields(settings):
            value = getattr(settings, f.name)
            if isinstance(value, float) and value and not finite.tiny <= abs(value) <= finite.max:
                raise ConfigError(
                    f"{f.name}={value:g} is outside what float32 (the weights, gradients and optimiser state, whatever "
                    f"dtype) holds: give 0 or a magnitude between {finite.tiny:.3g} and {finite.max:.3g}"
                )


def task_version(name: str) -> dict[str, str]:
    """The distribution that provides task `name` and its version (a plugin's, where a run is opened without it)."""
    info = default_registry().info(name)
    return {info.distribution: info.version} if info.distribution != "unknown" else {}


def installed_versions() -> dict[str, str]:
    found = {}
    for dist in ("gpt-core", "gpt-tasks", "gpt-train", "gpt-viz", "torch"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return found
