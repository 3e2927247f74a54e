"""The commands a user runs: run, tasks, eval, sample, verify, --help."""

from __future__ import annotations

import json
import sys

import pytest
from train_helpers import TINY, assert_one_line_error, is_count_of, read_metrics

from gpt_tasks import get_task, list_tasks
from gpt_tasks.builtin.sort import SortTask
from gpt_tasks.registry import default_registry
from gpt_viz import RunLayout

PICTURES = {RunLayout.CURVES_PICTURE, RunLayout.ATTENTION_PICTURE, RunLayout.GROKKING_PICTURE}


def test_run_writes_a_complete_run_directory(cli, tmp_path):
    with_pictures = [arg for arg in TINY if arg != "--no-pictures"]
    assert cli(*with_pictures, "--out", tmp_path / "r").code == 0
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert set(RunLayout.FILES) - {RunLayout.GROKKING_PICTURE} <= names  # grokking.png: two-split tasks only
    assert not [n for n in names if n.startswith(".")], "temporary files left behind"
    assert all((tmp_path / "r" / name).stat().st_size > 5_000 for name in PICTURES - {RunLayout.GROKKING_PICTURE})


def test_no_pictures_draws_no_png_and_keeps_everything_else(tiny_run):  # TINY runs with --no-pictures
    names = {p.name for p in tiny_run.iterdir()}
    assert set(RunLayout.FILES) - PICTURES <= names
    assert not [n for n in names if n.endswith(".png")]


def test_config_records_every_resolved_setting(tiny_run):
    config = json.loads((tiny_run / RunLayout.CONFIG).read_text())
    assert config["task"] == "sort" and config["task_params"]["length"] == 4
    assert config["model"]["n_layer"] == 1 and config["model"]["block_size"] == 7
    assert config["train"]["steps"] == 30 and config["train"]["batch_size"] == 32
    assert config["primary_metric"] == "heldout_exact_match"


def test_metrics_have_step_time_loss_lr_and_heldout_metrics(tiny_run):
    records = read_metrics(tiny_run)
    assert [r["step"] for r in records] == [5, 10, 15, 20, 25, 30]
    assert all({"step", "elapsed", "loss", "lr"} <= set(r) for r in records)
    evaluated = [r["step"] for r in records if "heldout_exact_match" in r]
    assert evaluated == [10, 20, 30]
    # Each evaluation scored the fixed sample of eval_limit = 200 sequences: exact match is a count out of 200.
    scored = [r for r in records[:-1] if "heldout_exact_match" in r]
    assert all(r["heldout_examples"] == 200 for r in scored)
    assert all(is_count_of(r["heldout_exact_match"], 200) for r in scored)


def test_final_metrics_cover_the_whole_heldout_split(tiny_run):
    final = json.loads((tiny_run / RunLayout.FINAL).read_text())
    assert final["step"] == 30
    assert final["heldout_examples"] == get_task("sort", length=4).split.count("heldout")
    assert is_count_of(final["heldout_exact_match"], final["heldout_examples"])
    assert read_metrics(tiny_run)[-1]["heldout_exact_match"] == final["heldout_exact_match"]


def test_tasks_lists_each_task_with_its_distribution(cli):
    result = cli("tasks")
    assert result.code == 0
    sort_line = next(line for line in result.out.splitlines() if line.startswith("sort "))
    info = next(t for t in list_tasks() if t.name == "sort")
    assert "builtin" in sort_line and "gpt-tasks" in sort_line and info.version in sort_line


def test_a_plugins_description_is_listed_on_one_line_with_no_terminal_escape(cli, monkeypatch):
    """A description holding a newline broke the table, and an escape byte reached the terminal as it was."""
    sort = type(get_task("sort", length=4))
    monkeypatch.setattr(sort, "description", "line one\nline two\x1b[31m red")
    result = cli("tasks")
    assert result.code == 0 and "\x1b" not in result.out
    sort_line = next(line for line in result.out.splitlines() if line.startswith("sort "))
    assert sort_line.endswith("line one line two?[31m red")


def test_tasks_json_is_machine_readable(cli):
    rows = json.loads(cli("tasks", "--json").out)
    assert {"sort", "addition", "modadd", "shakespeare"} <= {r["name"] for r in rows}
    assert all({"name", "plugin", "distribution", "version", "description"} <= set(r) for r in rows)


VERSIONLESS_PLUGIN = """
from gpt_core.plugins import hookimpl
from gpt_tasks.builtin.sort import SortTask


class Versionless(SortTask):
    name = "versionless"


@hookimpl
def register_tasks(register):
    register(Versionless)
"""


@pytest.fixture
def versionless_plugin(tmp_path, monkeypatch):
    """A task plugin installed from a distribution whose METADATA has a Name and no Version."""
    site = tmp_path / "site"
    (site / "versionless_plug-0.dist-info").mkdir(parents=True)
    (site / "versionless_plug-0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: versionless-plug\n")
    (site / "versionless_plug-0.dist-info" / "entry_points.txt").write_text("[gpt_tasks]\nvl = gt_versionless\n")
    (site / "gt_versionless.py").write_text(VERSIONLESS_PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    default_registry.cache_clear()
    yield
    default_registry.cache_clear()
    sys.modules.pop("gt_versionless", None)


def test_a_task_from_a_distribution_without_a_version_is_listed_trains_and_its_run_loads(
    cli, tmp_path, versionless_plugin
):
    """config.json recorded the missing version as null, and eval, sample and --resume refused the run for it."""
    listed = cli("tasks")
    assert listed.code == 0, listed.err
    line = next(line for line in listed.out.splitlines() if line.startswith("versionless "))
    assert line.split()[1:4] == ["vl", "versionless-plug", "unknown"]
    run_dir = tmp_path / "run"
    trained = cli(*[a if a != "sort" else "versionless" for a in TINY], "--out", run_dir)
    assert trained.code == 0, trained.err
    assert json.loads((run_dir / RunLayout.CONFIG).read_text())["versions"]["versionless-plug"] == "unknown"
    scored = cli("eval", run_dir, "--limit", "20")
    assert scored.code == 0 and scored.err == "", scored.err


def test_eval_set_cannot_change_the_answer_order_of_a_trained_addition_run(cli, tmp_path):
    """`--set reverse=false` scored a model trained on reversed sums against sums in the usual order, with no note."""
    shape = ("--set", "digits=2", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2")
    run_dir = tmp_path / "addition"
    trained = cli("run", "--task", "addition", "--device", "cpu", "--quiet", "--steps", "2", *shape, "--no-pictures",
                  "--out", run_dir)  # fmt: skip
    assert trained.code == 0, trained.err
    refused = cli("eval", run_dir, "--set", "reverse=false")
    assert_one_line_error(refused, "cannot change reverse of a trained addition run")
    assert cli("eval", run_dir, "--set", "digits=1").code == 0  # sums of another length: still scored


def test_the_summary_counts_wrong_examples_only_for_a_metric_the_task_declares_per_example(cli, tmp_path, monkeypatch):
    """A per-token primary metric whose (1 - value) x examples happened to be whole read "151 of 221 wrong" where
    218 were: whether a score counts examples is the task's to say (PromptAnswerTask: exact_match)."""
    args = [arg for arg in TINY if arg != "--quiet"]
    counted = cli(*args, "--out", tmp_path / "counted")
    assert counted.code == 0 and " wrong)" in counted.out, counted.err
    monkeypatch.setattr(SortTask, "per_example_metrics", ())
    result = cli(*args, "--out", tmp_path / "run")
    assert result.code == 0, result.err
    final = json.loads((tmp_path / "run" / RunLayout.FINAL).read_text())
    assert f" over {final['heldout_examples']:,.0f} examples;" in result.out and " wrong)" not in result.out


def test_eval_prints_the_metrics_of_a_saved_run(cli, tiny_run):
    result = cli("eval", tiny_run, "--json")
    assert result.code == 0, result.err
    final = json.loads((tiny_run / RunLayout.FINAL).read_text())
    assert json.loads(result.out)["exact_match"] == final["heldout_exact_match"]


def test_eval_of_an_unfinished_run_says_so_and_its_json_names_the_step(cli, tiny_run):
    """An interrupted or still-training run was scored without a word, and nothing said which step."""
    assert json.loads(cli("eval", tiny_run, "--json").out)["step"] == 30
    (tiny_run / RunLayout.FINAL).unlink()
    result = cli("eval", tiny_run, "--limit", "20")
    assert result.code == 0 and f"note: {tiny_run} is unfinished: scoring its checkpoint of step 30" in result.err


def test_eval_json_holds_null_for_a_metric_that_is_not_finite(cli, tiny_run, monkeypatch):
    """json.dumps wrote NaN (weights gone non-finite in a checkpoint), which strict JSON parsers refuse."""
    monkeypatch.setattr(
        "gpt_train.cli.trained.checked_metrics", lambda task, metrics: metrics | {"exact_match": float("nan")}
    )
    result = cli("eval", tiny_run, "--json", "--limit", "20")
    metrics = json.loads(result.out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert metrics["exact_match"] is None and "note: exact_match not finite: null in the JSON" in result.err


def test_eval_on_the_train_split_with_a_limit(cli, tiny_run):
    metrics = json.loads(cli("eval", tiny_run, "--split", "train", "--limit", "100", "--json").out)
    assert metrics["examples"] == 100
    result = cli("eval", tiny_run, "--limit", "10000000")  # length 4: 10^4 runs, 2,502 held out
    assert "note: scored 2,502 examples, all the task evaluates on the heldout split" in result.err


@pytest.mark.parametrize(
    "model",
    [["pos=rope"], ["pos=none"], ["pos=rope", "randomized_positions=true", "max_positions=32"],
     ["pos=learned", "randomized_positions=true", "max_positions=32"]],
    ids=["rope", "none", "randomized-rope", "randomized-learned"],
)  # fmt: skip
def test_eval_scores_runs_longer_than_trained(cli, tmp_path, model):
    """Length generalisation from the command line: trained on lengths 2-4 with the separator, scored at 10."""
    options = ["separator=true", "min_length=2", *model]
    run = cli(*TINY, "--steps", "10", *(a for o in options for a in ("--set", o)), "--out", tmp_path / "run")
    assert run.code == 0, run.err
    result = cli("eval", tmp_path / "run", "--set", "length=10", "--limit", "50", "--json")
    assert result.code == 0, result.err
    metrics = json.loads(result.out)
    assert metrics["examples"] == 50 and "position_9_accuracy" in metrics
    assert is_count_of(metrics["exact_match"], 50)


def test_sample_continues_each_prompt(cli, tiny_run):
    result = cli("sample", tiny_run, "--prompt", "3141", "--prompt", "2718")
    assert result.code == 0, result.err
    lines = result.out.strip().splitlines()
    assert [line.split(" -> ")[0] for line in lines] == ["3141", "2718"]
    assert all(len(line.split(" -> ")[1]) == 4 for line in lines)  # the answer: one token a digit
    assert "note:" not in result.err


def test_sample_answers_a_prompt_of_an_untrained_length_one_token_a_digit_and_says_so(cli, tiny_run):
    result = cli("sample", tiny_run, "--prompt", "314", "--prompt", "3141")
    assert result.code == 0, result.err
    assert [len(line.split(" -> ")[1]) for line in result.out.strip().splitlines()] == [3, 4]
    example = cli("sample", tiny_run).out.split(" -> ")[0]  # the first of the task's example prompts
    note = f"note: sort trains on prompts of 4 tokens, like {example!r}, and this one has 3: the model never learned"
    assert result.err.strip().splitlines() == [note + " to answer it"]


def test_sample_says_a_modadd_prompt_that_is_not_two_numbers_then_equals_was_never_trained_on(cli, tmp_path):
    run_dir = tmp_path / "modadd"
    run = cli("run", "--task", "modadd", "--set", "p=11", "--steps", "2", "--device", "cpu", "--quiet", "--no-pictures",
              "--out", run_dir)  # fmt: skip
    assert run.code == 0, run.err
    prompts = ["3 4 =", "1 2", "1", "= = =", "1 2 3"]
    result = cli("sample", run_dir, *(part for prompt in prompts for part in ("--prompt", prompt)))
    assert result.code == 0, result.err
    assert [line.split(" -> ")[0] for line in result.out.strip().splitlines()] == prompts
    example = cli("sample", run_dir).out.split(" -> ")[0]
    notes = result.err.strip().splitlines()
    assert notes == [
        f"note: modadd trains on prompts of two numbers then '=', like {example!r}, and this one is {prompt!r}: the "
        "model never learned to answer it"
        for prompt in prompts[1:]
    ]


def test_sample_refuses_a_prompt_longer_than_a_learned_position_models_block_in_one_line(cli, tiny_run):
    result = cli("sample", tiny_run, "--prompt", "31415926")  # block 7: 4 digits and 3 of the answer
    assert result.code == 2 and result.out == ""
    assert result.err.strip() == "gpt-train: error: prompt '31415926': 8 tokens, and the model reads at most 7"


def test_sample_with_and_without_cache_agree_when_greedy(cli, tiny_run):
    cached = cli("sample", tiny_run, "--prompt", "9081").out
    uncached = cli("sample", tiny_run, "--prompt", "9081", "--no-cache").out
    assert cached == uncached


def test_verify_prints_the_table_and_passes(cli):
    result = cli("verify", "--seed", "0")
    assert result.code == 0, result.err
    assert "LayerNorm" in result.out and "scaled_dot_product_attention" in result.out
    assert "checks within 1e-12" in result.out
    # The fast set's hand-written backwards refuse a second derivative; softmax, the weights and dropout answer it.
    assert "second derivatives: 3 checks within 1e-12" in result.out and ", 5 refused (each raises)" in result.out
    assert "LayerNorm: RuntimeError: gpt_core.kernels.layer_norm's backward differentiates once" in result.out


@pytest.mark.parametrize("tolerance", ["-1", "nan"])
def test_verify_refuses_a_negative_or_nan_tolerance(cli, tolerance):
    result = cli("verify", "--seed", "0", "--tolerance", tolerance)
    assert result.code == 2 and "Invalid value for '--tolerance'" in result.err and "Traceback" not in result.err


def test_verify_fails_when_the_tolerance_is_impossible(cli):
    result = cli("verify", "--seed", "0", "--tolerance", "0")
    assert result.code == 1 and "exceeds" in result.err


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["tasks"], ["kernels"], ["eval"], ["sample"], ["verify"], ["export"], ["serve"], ["inspect"]]
    + [["learn", *name] for name in ([], ["list"], ["start"], ["check"], ["train"])],
)
def test_every_command_has_help_with_an_example(cli, command):
    result = cli(*command, "--help")
    assert result.code == 0
    assert "Example" in result.out or "Start here" in result.out or "Start with" in result.out


@pytest.mark.parametrize("command", [[], ["inspect"]])
def test_a_group_given_no_command_prints_its_help_laid_out_not_as_an_error_line(cli, command):
    result = cli(*command)
    shown = result.out + result.err
    assert "gpt-train: error" not in shown
    assert shown.startswith(f"Usage: gpt-train {' '.join(command)}".rstrip() + " [OPTIONS]")
    assert "\nCommands:\n" in shown or "\nAnalyses:\n" in shown, shown


@pytest.mark.parametrize("analysis", ["heads", "logit-lens", "patch", "reads", "report", "phases"])
def test_each_inspect_analysis_shows_its_help_with_no_run_yet(cli, tmp_path, monkeypatch, analysis):
    monkeypatch.chdir(tmp_path)  # no runs/ here
    for args in ((analysis, "--help"), ("no-such-run", analysis, "--help"), (analysis, "-h")):
        shown = cli("inspect", *args)
        assert shown.code == 0, shown.err
        assert shown.out.startswith(f"Usage: gpt-train inspect RUN {analysis} [OPTIONS]") and "Example" in shown.out
    assert_one_line_error(cli("inspect", analysis), f"the run comes first: gpt-train inspect RUN {analysis}")
    assert_one_line_error(cli("inspect", "no-such-run", analysis), "run directory no-such-run does not exist")


def test_a_run_that_ends_inside_its_warm_up_says_the_learning_rate_it_reaches(cli, tmp_path):
    args = [arg for arg in TINY if arg != "--quiet"]  # sort warms up over 100 steps; TINY takes 30
    result = cli(*args, "--out", tmp_path / "run")
    assert result.code == 0, result.err
    said = "gpt-train: note: the run ends inside its warm-up (30 of warmup_steps 100): the learning rate reaches 0.0009"
    assert said in result.err
    full = cli(*args, "--set", "warmup_steps=30", "--out", tmp_path / "full")
    assert full.code == 0 and "warm-up" not in full.err


def test_a_run_whose_snapshots_add_up_says_how_many_and_how_much_disk(cli, tmp_path, monkeypatch):
    args = [arg for arg in TINY if arg != "--quiet"]
    quiet = cli(*args, "--set", "snapshot_every=1", "--out", tmp_path / "small")
    assert quiet.code == 0 and "snapshot_every" not in quiet.err  # 31 copies of a tiny model: nothing to say
    monkeypatch.setattr("gpt_train.cli.run.SNAPSHOTS_NOTED", 100_000)
    result = cli(*args, "--set", "snapshot_every=1", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    size = sum(path.stat().st_size for path in (tmp_path / "run" / "snapshots").iterdir())
    (said,) = [line for line in result.err.splitlines() if "snapshot_every" in line]
    assert said.startswith("gpt-train: note: snapshot_every=1 keeps 31 copies of the weights, about ")
    assert float(said.split("about ")[1].split(" GiB")[0]) == pytest.approx(size / 2**30, rel=0.25)


def test_a_split_too_large_to_list_is_said_to_be_scored_on_a_sample(cli, tmp_path):
    """Sort at length 7 has 10^7 sequences: eval and the run's summary score a fixed sample of 20,000, and say so,
    where "(9 of 20,000 wrong)" read as the whole split."""
    args = [arg for arg in TINY if arg != "--quiet"]
    run_dir = tmp_path / "run"
    result = cli(*args, "--set", "length=7", "--set", "final_eval_limit=300", "--out", run_dir)
    assert result.code == 0, result.err
    assert "of 300 wrong) (a fixed sample, drawn with replacement)" in result.out
    listed = cli("eval", run_dir, "--set", "length=4", "--limit", "50")
    assert listed.code == 0 and "too large to list" not in listed.err
    sampled = cli("eval", run_dir, "--set", "length=7")
    assert sampled.code == 0, sampled.err
    assert "note: the heldout split is too large to list: scored (a fixed sample" not in sampled.err
    assert "note: the heldout split is too large to list: scored a fixed sample, drawn with replacement" in sampled.err
