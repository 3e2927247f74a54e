"""The phase-change rule (what "sharply" means) on series built to have, or not to have, a sharp move, and the
induction picture drawn from records that log the induction probes."""

from __future__ import annotations

import numpy as np
import pytest

from gpt_viz import induction_formation, phase_change
from gpt_viz.errors import VizError
from gpt_viz.induction import LOOK_AT, Move, sharpest_move

STEPS = np.arange(0, 1001, 50)  # 21 evaluations; a tenth of the run is 100 steps, two intervals


def step_series(at: int, low: float, high: float) -> np.ndarray:
    """low before step `at`, high from it on: a jump between two evaluations."""
    return np.where(at <= STEPS, high, low)


def test_a_jump_is_a_sharp_move_at_the_evaluation_past_its_middle():
    move = sharpest_move(STEPS, step_series(400, 0.0, 0.8), sign=+1)
    assert move == Move(start=350, end=400, size=pytest.approx(0.8), at=400)
    assert sharpest_move(STEPS, step_series(400, 0.0, 0.8), sign=-1) is None  # it never falls


def test_a_slow_ramp_and_a_small_jump_are_not_sharp():
    ramp = np.linspace(0.0, 1.0, len(STEPS))  # a tenth of the run moves it a tenth of its range
    assert sharpest_move(STEPS, ramp, sign=+1) is None
    small = step_series(400, 0.0, 0.05)  # all of its range, but under MIN_MOVE
    assert sharpest_move(STEPS, small, sign=+1) is None


def records(jump_at: int, icl_at: int, previous_at: int) -> list[dict]:
    rows = []
    for i, step in enumerate(STEPS):
        row = {"step": int(step), "elapsed": float(i), "heldout_loss": 3.0 - (step >= jump_at)}
        row["heldout_probe_icl_score"] = float(step_series(icl_at, -0.1, -1.5)[i])
        row["heldout_probe_induction_l1h0"] = float(step_series(jump_at, 0.02, 0.7)[i])
        row["heldout_probe_induction_l1h1"] = 0.02
        row["heldout_probe_induction_l0h0"] = 0.02
        row["heldout_probe_induction_l0h1"] = 0.02
        row["heldout_probe_previous_token_l0h0"] = float(step_series(previous_at, 0.05, 0.9)[i])
        row["heldout_probe_previous_token_l0h1"] = 0.05
        rows.append(row)
    return rows


def test_the_phase_change_is_the_induction_rise_that_meets_the_icl_fall():
    change = phase_change(records(jump_at=500, icl_at=550, previous_at=450))
    assert change.step == 500 and change.head == (1, 0)
    assert change.induction_move == pytest.approx(0.68) and change.icl_move == pytest.approx(-1.4)
    assert change.previous_token_step == 450 and change.rise == (450, 500)


def test_moves_far_apart_are_no_phase_change():
    assert phase_change(records(jump_at=200, icl_at=800, previous_at=100)) is None


def test_a_sharp_rise_that_stops_short_of_an_induction_head_is_no_phase_change():
    rows = records(jump_at=500, icl_at=500, previous_at=450)
    for row in rows:
        row["heldout_probe_induction_l1h0"] = min(row["heldout_probe_induction_l1h0"], 0.45)  # 0.02 -> 0.45
    assert phase_change(rows) is None


def test_the_picture_draws_the_four_panels_and_refuses_records_without_the_probes():
    figure = induction_formation(records(500, 500, 450), phase_step=500, title="constructed")
    assert len(figure.axes) == 4
    assert "phase change at step 500" in figure.axes[0].get_title()
    assert len(figure.axes[2].lines) == 4 + 1  # four heads' induction scores and the phase line
    with pytest.raises(VizError, match="no induction probes"):
        induction_formation([{"step": 0, "heldout_loss": 1.0}])


def test_the_picture_says_what_to_look_for():
    caption = induction_formation(records(500, 500, 450), phase_step=500).get_supxlabel()
    assert caption.splitlines() == list(LOOK_AT)
    assert "induction score jumps" in caption and "previous-token head" in caption
