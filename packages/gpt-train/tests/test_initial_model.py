"""initial_model: a run's step-0 weights, rebuilt from its configuration alone."""

from __future__ import annotations

import dataclasses

import torch

from gpt_train.config import resolve_run_config
from gpt_train.distributed import Rank
from gpt_train.runs import Run
from gpt_train.trainer import Trainer, initial_model
from gpt_viz import RunLayout

SMALL = {"length": 4, "n_layer": 1, "n_embd": 32, "n_head": 2, "init_scale": 3.0}


def test_the_trainer_starts_from_initial_model_and_the_seed_decides_it(tmp_path):
    config, task = resolve_run_config("sort", SMALL)
    torch.manual_seed(123)  # whatever the global generator held before
    trainer = Trainer(Run(config, task, RunLayout(tmp_path), torch.device("cpu"), Rank(), resume=False), quiet=True)
    rebuilt = initial_model(config).state_dict()
    assert all(torch.equal(value, rebuilt[name]) for name, value in trainer.model.state_dict().items())
    other = initial_model(dataclasses.replace(config, train=dataclasses.replace(config.train, seed=7)))
    assert not torch.equal(other.wte.weight, trainer.model.wte.weight)
