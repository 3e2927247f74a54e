"""Every built-in task's defaults() describe a model that can actually be built, and the recipe it trains with.
The training settings those overrides name are gpt-train's, which checks them (its test_training.py)."""

from __future__ import annotations

import dataclasses

from gpt_core import GPT, GPTConfig
from gpt_tasks import Defaults, list_tasks


def test_every_builtin_task_is_covered(builtin_tasks):
    builtin = {info.name for info in list_tasks() if info.plugin == "builtin"}
    assert {task.name for task in builtin_tasks} == builtin


def test_defaults_build_a_valid_model_and_name_their_training_overrides(builtin_tasks):
    for task in builtin_tasks:
        defaults = task.defaults()
        assert isinstance(defaults, Defaults) and all(isinstance(key, str) for key in defaults.train), task.name
        assert (defaults.model.vocab_size, defaults.model.block_size) == (task.vocab_size, task.block_size)
        assert GPT(defaults.model).num_parameters() < 2_000_000, task.name  # CPU-sized


def _differences(value, default) -> dict:
    """The fields of a dataclass that differ from a default instance's."""
    pairs = ((f.name, getattr(value, f.name), getattr(default, f.name)) for f in dataclasses.fields(value))
    return {name: mine for name, mine, theirs in pairs if mine != theirs}


def test_defaults_resolve_to_the_recorded_recipes(builtin_tasks):
    """The measured recipes, pinned: the model's differences from GPTConfig's own defaults and the training
    settings each task overrides, so that neither changes silently what `gpt-train run --task NAME` trains."""
    sort, addition, modadd, shakespeare, text, repeats = builtin_tasks
    base_model = GPTConfig(vocab_size=1, block_size=1)
    expected = {
        sort: (
            {"n_layer": 2, "n_embd": 64},
            {"steps": 1200, "batch_size": 128, "lr": 3e-3, "early_eval_every": 25, "early_eval_until": 250},
        ),
        addition: ({"n_layer": 2, "n_embd": 64}, {"batch_size": 128, "lr": 3e-3, "min_lr": 3e-4}),
        modadd: (
            {"n_layer": 1, "n_embd": 64, "tie_weights": False, "layernorm": False, "init_scale": 8.0},
            {
                "steps": 10000,
                "batch_size": modadd.split.count("train"),  # full batch
                "lr": 1.2e-2,
                "warmup_steps": 10,
                "schedule": "constant",
                "min_lr": 1.2e-3,
                "cooldown_steps": 600,
                "cooldown_trigger": 0.99,
                "weight_decay": 1.0,
                "beta2": 0.98,
                "grad_clip": 0.0,
                "eval_every": 20,
                "eval_limit": 113**2,
            },
        ),
        shakespeare: ({}, {"batch_size": 12, "eval_limit": 200, "final_eval_limit": None}),
        text: ({}, {"batch_size": 12, "eval_limit": 200, "final_eval_limit": 4096}),
        repeats: (
            {"n_layer": 2, "n_head": 2, "n_embd": 64, "mlp": False, "pos": "rope"},
            {"steps": 1000, "lr": 3e-3, "weight_decay": 0.0, "eval_every": 25, "eval_limit": 512, "warmup_steps": 50},
        ),
    }
    for task, (model, train) in expected.items():
        defaults = task.defaults()
        shape = _differences(defaults.model, base_model)
        assert {k: v for k, v in shape.items() if k not in ("vocab_size", "block_size")} == model, task.name
        assert defaults.train == train, task.name
    assert (modadd.params.p, modadd.params.train_fraction) == (113, 0.2)  # the data the grokking recipe is for


def test_primary_metric_is_among_the_metrics_evaluate_returns(builtin_tasks, tiny_model):
    for task in builtin_tasks:
        metrics = task.evaluate(tiny_model(task), "heldout", "cpu", limit=8)
        assert task.primary_metric in metrics, task.name
        assert set(task.eval_splits) <= {"train", "heldout"}
