"""Grokking's phase boundaries read off records built to cross each threshold at a known step, and the picture of
the progress measures drawn from them."""

from __future__ import annotations

import pytest

from gpt_viz import grokking_phases, progress_measures
from gpt_viz.errors import VizError
from gpt_viz.phases import LOOK_AT, Phases, first_below


def records(fit: int = 100, leaves_chance: int = 600, generalised: int = 800, last: int = 1000) -> list[dict]:
    """Evaluations every 20 steps: train accuracy 1 from `fit`, held-out accuracy 0.01, then 0.5 from
    `leaves_chance` and 1 from `generalised`, with the three progress measures."""
    rows = []
    for step in range(20, last + 1, 20):
        heldout = 1.0 if step >= generalised else 0.5 if step >= leaves_chance else 0.01
        rows.append({
            "step": step, "train_accuracy": 1.0 if step >= fit else 0.5, "heldout_accuracy": heldout,
            "train_loss": 0.01 if step >= fit else 2.0, "heldout_loss": 0.01 if step >= generalised else 9.0,
            "restricted_loss": max(0.01, 4.6 - step / 150), "excluded_loss": 0.01 + step / 100,
            "weight_norm": 50.0 - 10.0 * (step >= leaves_chance),
        })  # fmt: skip
    return rows


def test_the_phases_start_where_each_accuracy_first_crosses_its_threshold():
    assert grokking_phases(records()) == Phases(fit=100, cleanup=600, generalised=800)


def test_held_out_accuracy_before_the_fit_does_not_start_cleanup():
    rows = records(fit=300)
    rows[0]["heldout_accuracy"] = 0.5  # step 20, before the training set is fitted
    assert grokking_phases(rows).cleanup == 600


def test_a_run_that_never_generalises_has_no_cleanup_end():
    assert grokking_phases(records(leaves_chance=2000, generalised=2000)) == Phases(100, None, None)
    assert grokking_phases(records(fit=5000)) == Phases(None, None, None)


def test_first_below_reads_the_records():
    rows = records()
    assert first_below(rows, "restricted_loss", 2.3) == 360  # 4.6 - 360 / 150 = 2.2
    assert first_below(rows, "heldout_loss", 1.0) == 800
    assert first_below(rows, "heldout_loss", -1.0) is None


def test_the_picture_draws_three_panels_with_the_phases_in_the_title():
    figure = progress_measures(records(), title="constructed")
    assert len(figure.axes) == 3
    assert figure.axes[0].get_title() == "constructed\nt_fit 100, cleanup from 600, t_gen 800"
    assert figure.get_supxlabel().replace("\n", " ") == LOOK_AT
    labels = [line.get_label() for line in figure.axes[1].get_lines()]
    assert labels == ["train loss", "held-out loss", "restricted loss (held-out, key frequencies only)",
                      "excluded loss (train, key frequencies removed)"]  # fmt: skip


def test_records_without_the_measures_are_refused():
    rows = [{k: v for k, v in row.items() if k != "excluded_loss"} for row in records()]
    with pytest.raises(VizError, match="no excluded_loss"):
        progress_measures(rows)
