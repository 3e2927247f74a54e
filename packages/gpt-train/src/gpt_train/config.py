"""The resolved configuration of a run: task defaults, overridden by flags, overridden by --set.

Everything a run depends on ends up here and in the run directory's config.json, so that
`eval`, `sample` and `--resume` rebuild exactly the same task and model.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpt_core import GPTConfig
from gpt_tasks import ParamError, Task, TaskError, TrainDefaults, get_task
from gpt_tasks.params import build, field_types
from gpt_tasks.registry import default_registry
from gpt_train.errors import UserError

CONFIG_NAME = "config.json"
TASK_FIXED_MODEL_FIELDS = ("vocab_size", "block_size")  # decided by the task, not settable


@dataclass(frozen=True)
class TrainSettings:
    """Optimisation and bookkeeping. Defaults come from the task's TrainDefaults."""

    steps: int
    batch_size: int
    lr: float
    min_lr: float
    warmup_steps: int
    schedule: Literal["cosine", "constant"]
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    eval_every: int
    eval_limit: int
    seed: int = 1337
    log_every: int = 10
    checkpoint_every: int = 500
    decay_position_embedding: bool = False
    compile: bool = False
    final_eval_limit: int | None = None  # None: score the whole held-out split at the end

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_limit", "log_every", "checkpoint_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("warmup_steps", "weight_decay", "grad_clip", "min_lr"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.final_eval_limit is not None and self.final_eval_limit <= 0:
            raise ValueError(f"final_eval_limit must be positive, got {self.final_eval_limit}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"betas must be in [0, 1), got ({self.beta1}, {self.beta2})")

    @classmethod
    def from_defaults(cls, defaults: TrainDefaults) -> dict[str, Any]:
        values = dataclasses.asdict(defaults)
        values.pop("model")
        beta1, beta2 = values.pop("betas")
        return values | {"beta1": beta1, "beta2": beta2}


@dataclass(frozen=True)
class RunConfig:
    task: str
    task_params: dict[str, Any]
    model: GPTConfig
    train: TrainSettings
    primary_metric: str
    higher_is_better: bool
    eval_splits: tuple[str, ...] = ("heldout",)
    versions: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["eval_splits"] = list(self.eval_splits)
        return data

    def save(self, run_dir: Path) -> None:
        (run_dir / CONFIG_NAME).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, run_dir: Path) -> RunConfig:
        path = run_dir / CONFIG_NAME
        if not path.is_file():
            raise UserError(f"{run_dir} is not a run directory (no {CONFIG_NAME})")
        try:
            data = json.loads(path.read_text())
            return cls(
                task=data["task"],
                task_params=data["task_params"],
                model=GPTConfig(**data["model"]),
                train=TrainSettings(**data["train"]),
                primary_metric=data["primary_metric"],
                higher_is_better=data["higher_is_better"],
                eval_splits=tuple(data["eval_splits"]),
                versions=data.get("versions", {}),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{path} is not a valid run configuration ({error})") from None

    def build_task(self, overrides: dict[str, Any] | None = None) -> Task:
        return make_task(self.task, self.task_params | (overrides or {}))


def make_task(name: str, params: dict[str, Any]) -> Task:
    try:
        return get_task(name, **params)
    except (TaskError, ParamError) as error:
        raise UserError(str(error).strip("'\"")) from None
    except (ValueError, OSError) as error:  # the task's own construction: a missing data file, say
        raise UserError(f"task {name!r}: {error}") from None


def parse_assignments(pairs: tuple[str, ...]) -> dict[str, str]:
    """['key=value', ...] -> {key: value}; a pair without '=' is an error."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key=value, got {pair!r}")
        parsed[key.strip()] = value.strip()
    return parsed


def split_assignments(assignments: dict[str, str], task_class: type[Task]) -> tuple[dict, dict, dict]:
    """Route each --set key to the task, the model or the training settings.

    A key may be prefixed (`task.length`, `model.n_layer`, `train.lr`) where a name is ambiguous;
    bare keys are looked up in the task's parameters first, then the model, then training.
    """
    scopes = {
        "task": set(field_types(task_class.Params)),
        "model": set(field_types(GPTConfig)) - set(TASK_FIXED_MODEL_FIELDS),
        "train": set(field_types(TrainSettings)),
    }
    routed: dict[str, dict[str, str]] = {scope: {} for scope in scopes}
    for key, value in assignments.items():
        scope, dot, name = key.partition(".")
        if dot and scope in scopes:
            if name not in scopes[scope]:
                raise UserError(f"unknown --set key {key!r}; {scope} keys: {', '.join(sorted(scopes[scope]))}")
            routed[scope][name] = value
            continue
        owner = next((s for s, names in scopes.items() if key in names), None)
        if owner is None:
            known = ", ".join(sorted(set().union(*scopes.values())))
            raise UserError(f"unknown --set key {key!r}; known keys: {known}")
        routed[owner][key] = value
    return routed["task"], routed["model"], routed["train"]


def resolve_run_config(task_name: str, flags: dict[str, Any], assignments: tuple[str, ...]) -> tuple[RunConfig, Task]:
    """Task defaults, then explicit flags (None = not given), then --set assignments.

    Returns the configuration and the task it built (building a task can hash its whole split,
    so it is built once).
    """
    try:
        task_class = default_registry().info(task_name).task_class
    except TaskError as error:
        raise UserError(str(error).strip("'\"")) from None
    task_sets, model_sets, train_sets = split_assignments(parse_assignments(assignments), task_class)
    task = make_task(task_name, task_sets)
    defaults = task.defaults()
    try:
        model = build(
            GPTConfig,
            defaults.model | model_sets | {"vocab_size": task.vocab_size, "block_size": task.block_size},
            what="model setting",
        )
    except ParamError as error:
        raise UserError(f"invalid model shape: {error}") from None
    given_flags = {k: v for k, v in flags.items() if v is not None}
    try:
        train = build(
            TrainSettings, TrainSettings.from_defaults(defaults) | given_flags | train_sets, "training setting"
        )
    except ParamError as error:
        raise UserError(f"invalid training setting: {error}") from None
    config = RunConfig(
        task=task_name,
        task_params=dataclasses.asdict(task.params),
        model=model,
        train=train,
        primary_metric=f"heldout_{task.primary_metric}",
        higher_is_better=task.higher_is_better,
        eval_splits=tuple(task.eval_splits),
        versions=_versions(),
    )
    return config, task


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("gpt-core", "gpt-tasks", "gpt-train", "gpt-viz", "torch"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return found
