"""`gpt-train inspect RUN phases`: grokking's progress measures (Nanda et al. 2023) on a modadd run's own
snapshots, the table, the record and picture it writes, the findings in words, and the runs it refuses in one
line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from lab_runs import gpt_train
from train_helpers import TINY, assert_one_line_error, read_metrics

from gpt_train.lab import InspectError
from gpt_train.lab.phases import (
    HELDOUT_ACCURACY,
    HELDOUT_LOSS,
    TRAIN_ACCURACY,
    TRAIN_LOSS,
    GrokkingProgress,
    measure_progress,
    phases_findings,
)
from gpt_viz import RunLayout

# modadd at p = 23, 200 steps: it memorises its 132 training pairs by step 40 and stays near chance held out.
SMALL_MODADD = ("run", "--task", "modadd", "--device", "cpu", "--quiet", "--no-pictures", "--steps", "200",
                "--set", "p=23", "--set", "eval_every=20", "--set", "snapshot_every=20")  # fmt: skip
MEASURED = {"step", TRAIN_ACCURACY, HELDOUT_ACCURACY, TRAIN_LOSS, HELDOUT_LOSS, "restricted_loss", "excluded_loss",
            "weight_norm"}  # fmt: skip


@pytest.fixture(scope="module")
def modadd_dir(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("phases") / "modadd"
    gpt_train(*SMALL_MODADD, "--out", run_dir)
    return run_dir


@pytest.fixture
def run_copy(modadd_dir, tmp_path) -> Path:
    return Path(shutil.copytree(modadd_dir, tmp_path / "modadd"))


def test_the_measures_are_taken_at_every_snapshot_and_agree_with_the_runs_own_evaluations(modadd_dir):
    result = measure_progress(modadd_dir)
    assert [record["step"] for record in result.records] == list(range(0, 201, 20))
    assert all(set(record) == MEASURED for record in result.records)
    evaluations = {r["step"]: r for r in read_metrics(modadd_dir) if TRAIN_ACCURACY in r}
    for record in result.records[1:]:  # step 0 is never evaluated
        logged = evaluations[record["step"]]
        for key in (TRAIN_ACCURACY, HELDOUT_ACCURACY):
            assert record[key] == pytest.approx(logged[key], abs=1e-12), (record["step"], key)
        for key in (TRAIN_LOSS, HELDOUT_LOSS):
            assert record[key] == pytest.approx(logged[key], rel=1e-4, abs=1e-6), (record["step"], key)
    assert result.p == 23 and all(1 <= k <= 11 for k in result.keys)
    assert result.phases.fit is not None and result.phases.fit <= 60  # memorised early, as the run logged


def test_inspect_phases_prints_the_table_writes_the_record_and_picture_and_says_what_they_show(cli, run_copy):
    result = cli("inspect", run_copy, "phases", "--device", "cpu")
    assert result.code == 0, result.err
    out = result.out
    assert "measuring 11 snapshots with the key frequencies of the checkpoint of step 200" in out
    assert "restricted loss" in out and "excluded loss" in out and "t_fit (train acc >= 0.99)" in out
    assert f"wrote {RunLayout(run_copy).phases} and {RunLayout(run_copy).phases_picture}" in out
    record = json.loads((RunLayout(run_copy).phases).read_text())
    assert record["step"] == 200 and record["task"] == "modadd" and len(record["records"]) == 11
    assert record["phases"]["fit"] is not None
    assert (RunLayout(run_copy).phases_picture).stat().st_size > 10_000
    findings = out.split("findings:\n")[1]
    assert "key frequencies of the trained model" in findings
    assert f"train accuracy reaches 0.99 at step {record['phases']['fit']}" in findings


def test_a_run_of_another_task_is_one_line(cli, tmp_path):
    run_dir = tmp_path / "sort"
    assert cli(*TINY, "--out", run_dir).code == 0
    result = cli("inspect", run_dir, "phases", "--device", "cpu")
    assert_one_line_error(result, f"phases measures grokking on a modadd run; {run_dir} is a run of task 'sort'")


def test_a_modadd_run_without_snapshots_is_one_line_saying_how_to_keep_them(cli, run_copy):
    shutil.rmtree(run_copy / RunLayout.SNAPSHOTS)
    result = cli("inspect", run_copy, "phases", "--device", "cpu")
    assert_one_line_error(result, f"{run_copy} kept no snapshots", "--set snapshot_every=20")
    assert not (RunLayout(run_copy).phases).exists()
    with pytest.raises(InspectError, match="kept no snapshots"):
        measure_progress(run_copy)


# the findings, on records built to go through each phase ----------------------------------------------------
def records(fit: int | None, cleanup: int | None, generalised: int | None, spikes=(), last: int = 600) -> list[dict]:
    """A run's records every 20 steps: train accuracy reaching 1 at `fit`, held-out accuracy leaving chance at
    `cleanup` and reaching 1 at `generalised`; the restricted loss falling and the excluded loss rising after
    the fit, the weight norm falling after cleanup, and the training loss spiking at `spikes`."""
    rows = []
    for step in range(0, last + 1, 20):
        fitted = fit is not None and step >= fit
        left = cleanup is not None and step >= cleanup
        done = generalised is not None and step >= generalised
        rows.append(
            {
                "step": step,
                TRAIN_ACCURACY: 1.0 if fitted else 0.5,
                HELDOUT_ACCURACY: 1.0 if done else 0.5 if left else 0.01,
                TRAIN_LOSS: 1.0 if step in spikes else 0.001 if fitted else 2.0,
                HELDOUT_LOSS: 0.01 if done else 3.0 if left else 5.0,
                "restricted_loss": 1.0 if left else 3.0 if fitted else 5.0,
                "excluded_loss": 3.0 if left else 0.1,
                "weight_norm": 30.0 if done else 40.0 if left else 50.0,
            }
        )
    return rows


def test_the_findings_name_each_phase_with_the_runs_numbers():
    findings = phases_findings(GrokkingProgress(113, [5, 31], records(80, 300, 400, spikes=(200, 500))))
    assert findings[0].startswith("key frequencies of the trained model: 5, 31 (each holding at least 5%")
    assert findings[1] == (
        "memorisation, steps 0-80: train accuracy reaches 0.99 at step 80 while held-out accuracy is 0.01, and the "
        "excluded loss is 0.10 nats"
    )
    assert findings[2] == (
        "circuit formation, steps 80-300: the restricted loss falls from 3.00 to 1.00 nats while the held-out loss is "
        f"3.00 (chance ln 113 = {math.log(113):.2f}), and the excluded loss rises from 0.10 to 3.00"
    )
    assert findings[3] == (
        "cleanup, steps 300-400: held-out accuracy reaches 0.99 at step 400; the weight norm falls from 40.0 to "
        "30.0 and the held-out loss falls from 3.00 to 0.01 nats"
    )
    assert findings[4] == (
        "the training loss spikes above 0.05 nats 2 times after the fit (at steps 200, 500): the slingshot "
        "(Thilak et al. 2022)"
    )


def test_the_findings_say_which_phase_a_run_never_reached():
    never_fitted = phases_findings(GrokkingProgress(113, [], records(None, None, None)))
    assert never_fitted[-1].startswith("memorisation: train accuracy never reaches 0.99 by step 600")
    assert "key frequencies of the trained model: none" in never_fitted[0]
    memorised = phases_findings(GrokkingProgress(113, [5], records(80, None, None)))
    assert memorised[-1].startswith("circuit formation from step 80: held-out accuracy never reaches 0.1 by step 600")
    assert memorised[-1].endswith("train longer to see it generalise")
    cleaning = phases_findings(GrokkingProgress(113, [5], records(80, 300, None)))
    assert cleaning[-1].startswith("cleanup from step 300: held-out accuracy never reaches 0.99 by step 600")


def test_a_measure_at_a_phase_never_reached_is_none():
    progress = GrokkingProgress(113, [5], records(80, None, None))
    assert progress.at("weight_norm", progress.phases.generalised) is None
    assert progress.at("weight_norm", progress.phases.fit) == progress.at("weight_norm", 80)
