"""Grokfast: the EMA gradient filter on known gradients, and its place in the training step."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from train_helpers import TINY, assert_one_line_error

from gpt_train.config import resolve_run_config
from gpt_train.distributed import Rank
from gpt_train.grokfast import Grokfast
from gpt_train.runs import Run
from gpt_train.trainer import Trainer
from gpt_viz import RunLayout


class Two(nn.Module):
    """Two parameters; `unused` never gets a gradient."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3, dtype=torch.float64))
        self.unused = nn.Parameter(torch.zeros(2, dtype=torch.float64))


def filtered(module: Two, grokfast: Grokfast, gradients: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for g in gradients:
        module.weight.grad = g.clone()
        grokfast.apply(module)
        out.append(module.weight.grad.clone())
    return out


def test_the_filter_adds_lambda_times_the_gradients_moving_average():
    """ema_1 = g_1, ema_t = alpha ema_(t-1) + (1 - alpha) g_t and output g_t + lambda ema_t, in closed form."""
    alpha, lamb = 0.8, 2.0
    gradients = [torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) * (-1) ** t + t for t in range(6)]
    out = filtered(Two(), Grokfast(alpha, lamb), gradients)
    for t, g in enumerate(gradients):
        ema = alpha**t * gradients[0] + sum((1 - alpha) * alpha ** (t - s) * gradients[s] for s in range(1, t + 1))
        torch.testing.assert_close(out[t], g + lamb * ema, rtol=0, atol=1e-12)


def test_a_constant_gradient_is_amplified_by_one_plus_lambda_and_an_alternating_one_is_damped():
    constant = filtered(Two(), Grokfast(0.98, 2.0), [torch.ones(3, dtype=torch.float64)] * 5)
    assert all(torch.allclose(g, torch.full((3,), 3.0, dtype=torch.float64)) for g in constant)
    flip = [torch.ones(3, dtype=torch.float64) * (-1) ** t for t in range(200)]
    slow = filtered(Two(), Grokfast(0.98, 2.0), flip)[-1]  # the average of +1, -1, ... is near 0
    assert torch.all(slow.abs() < 1.1)


def test_parameters_without_a_gradient_get_no_average():
    module, grokfast = Two(), Grokfast(0.9, 1.0)
    filtered(module, grokfast, [torch.ones(3, dtype=torch.float64)])
    assert set(grokfast.state_dict()) == {"weight"} and module.unused.grad is None


def test_saved_averages_are_restored_and_a_mismatch_is_refused():
    module, grokfast = Two(), Grokfast(0.9, 1.0)
    filtered(module, grokfast, [torch.arange(3.0, dtype=torch.float64)])
    again = Grokfast(0.9, 1.0)
    again.load_state_dict(grokfast.state_dict(), module)
    assert torch.equal(again.ema["weight"], grokfast.ema["weight"])
    for bad in ({"bias": torch.zeros(3)}, {"weight": torch.zeros(4)}):
        with pytest.raises(ValueError, match="matches no parameter of this model"):
            Grokfast(0.9, 1.0).load_state_dict(bad, module)


def trainer(tmp_path, *assignments: str) -> Trainer:
    values = {"steps": 3, "batch_size": 32, "length": 4, "n_layer": 1, "n_embd": 32, "n_head": 2}
    values |= dict(a.split("=") for a in assignments)
    config, task = resolve_run_config("sort", values)
    return Trainer(Run(config, task, RunLayout(tmp_path), torch.device("cpu"), Rank(), resume=False), quiet=True)


def test_off_by_default_so_the_step_is_plain_adamw(tmp_path, monkeypatch):
    monkeypatch.setattr(Grokfast, "apply", lambda self, model: pytest.fail("Grokfast applied while off"))
    plain = trainer(tmp_path)
    assert plain.settings.grokfast_lambda == 0 and plain.grokfast is None
    plain.train_step(0)


def test_on_it_changes_the_step_and_keeps_one_average_per_parameter(tmp_path):
    plain, fast = trainer(tmp_path / "plain"), trainer(tmp_path / "fast", "grokfast_lambda=5")
    for step in range(3):
        plain.train_step(step)
        fast.train_step(step)
    assert set(fast.grokfast.state_dict()) == {name for name, _ in fast.model.named_parameters()}
    assert not torch.equal(plain.model.wte.weight, fast.model.wte.weight)


@pytest.mark.parametrize(
    "setting, message",
    [("grokfast_alpha=1", "grokfast_alpha must be in [0, 1), got 1.0"),
     ("grokfast_alpha=-0.1", "grokfast_alpha must be in [0, 1), got -0.1"),
     ("grokfast_lambda=-2", "grokfast_lambda must not be negative, got -2.0"),
     ("grokfast_lambda=nan", "grokfast_lambda must be a finite number, got nan")],
)  # fmt: skip
def test_bad_grokfast_settings_are_one_line_errors(cli, tmp_path, setting, message):
    assert_one_line_error(cli(*TINY, "--set", setting, "--out", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()
