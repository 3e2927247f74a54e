"""Hostile inputs to the run directory, the settings, the environment, inspect and serve: a read-only output
folder, float settings past float32, a record of a checkpoint that is not the final one, an --examples past the
split, a text run whose corpus is gone, config.json sizes and types its checkpoint does not hold, torchrun's
variables left behind, a damaged inspect record, and a model with nothing to patch. Each is one line (or the
right result), and nothing already written is lost."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import pytest
import torch
from train_helpers import TINY, assert_one_line_error

from gpt_train.analysis.common import InspectError
from gpt_train.config import RunConfig
from gpt_train.files import WriteError, write_atomically
from gpt_train.inspect_cli import inspect_patch
from gpt_train.runs import load_run
from gpt_train.serve import Explorer
from gpt_viz import RunLayout, VizError


def test_a_read_only_folder_is_the_write_error_not_the_clean_ups(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    target.write_text("old")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "unlink", read_only)  # the clean-up fails as the write did
    with pytest.raises(WriteError, match=r"cannot write .*config.json \(Read-only file system\)"):
        write_atomically(target, read_only)
    assert target.read_text() == "old"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("grokfast_lambda=1e39", "grokfast_lambda=1e+39 is outside what float32"),
        ("lr=1e39", "lr=1e+39"),
        ("min_lr=1e-50", "min_lr=1e-50"),
        ("weight_decay=3.5e38", "weight_decay=3.5e+38"),
        ("init_scale=1e300", "init_scale=1e+300"),
    ],
)
def test_a_float_setting_float32_cannot_hold_is_refused_before_anything_is_written(cli, tmp_path, setting, named):
    out = tmp_path / "run"
    assert_one_line_error(cli(*TINY, "--set", setting, "--out", out), named)
    assert not out.exists() or not any(out.iterdir())


def test_the_largest_float32_setting_is_accepted(cli, tmp_path):
    result = cli(*TINY, "--steps", "1", "--set", "grad_clip=3.4e38", "--out", tmp_path / "run")
    assert result.code == 0, result.err


def test_inspect_records_the_checkpoint_step_and_bounds_examples_by_the_split(cli, tmp_path):
    run_dir = tmp_path / "run"
    assert cli(*TINY, "--out", run_dir).code == 0
    result = cli("inspect", run_dir, "heads", "--examples", 50, "--device", "cpu")
    assert result.code == 0, result.err
    assert "inspecting the checkpoint of step 30" in result.out
    assert json.loads(RunLayout(run_dir).heads_ablation.read_text())["step"] == 30
    held = cli("inspect", run_dir, "heads", "--examples", 10**12, "--device", "cpu")
    assert_one_line_error(held, "--examples 1,000,000,000,000 is more than the", "held-out examples of this run")
    assert_one_line_error(cli("inspect", run_dir, "logit-lens", "--examples", 10**12), "is more than the")


def test_a_text_run_whose_corpus_is_gone_samples_with_its_recorded_tokenizer(cli, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    run_dir = tmp_path / "run"
    small = ("--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "block_size=16")
    train = ("--set", "chunk_size=64", "--set", "final_eval_limit=8", "--set", "eval_limit=8", "--quiet")
    result = cli("run", "--task", "text", "--data", corpus, "--steps", "2", *small, *train, "--out", run_dir)
    assert result.code == 0, result.err
    before = RunConfig.load(run_dir).build_sampler()
    corpus.unlink()
    with pytest.warns(UserWarning, match="is gone; sampling with the tokenizer the run recorded"):
        after = RunConfig.load(run_dir).build_sampler()
    assert after.encode("the fox") == before.encode("the fox")
    assert after.decode(before.encode("lazy dog")) == "lazy dog"
    with pytest.raises(ValueError, match="give --prompt"):
        after.example_prompts()


def edit_config(run_dir: Path, change) -> None:
    path = run_dir / RunLayout.CONFIG
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("n_embd", 10**9, "config.json's vocab_size x n_embd is (10, 1000000000), but checkpoint"),
        ("n_layer", 10**6, "config.json has n_layer=1000000, but checkpoint"),
        ("vocab_size", 10**9, "config.json's vocab_size x n_embd is (1000000000, 32)"),
        ("block_size", 10**9, "config.json's block_size x n_embd is (1000000000, 32)"),
        ("max_positions", 10**9, "config.json's max_positions x n_embd is (1000000000, 32)"),
    ],
)
def test_config_sizes_the_checkpoint_does_not_hold_are_one_line_and_no_model_is_built(
    cli, tiny_run, monkeypatch, setting, value, said
):
    edit_config(tiny_run, lambda config: config["model"].update({setting: value}))

    def never(*args, **kwargs):
        raise AssertionError("a model was built from config.json before its checkpoint was compared")

    monkeypatch.setattr("gpt_train.runs.GPT", never)
    for command in (["eval", tiny_run], ["sample", tiny_run], ["run", "--resume", tiny_run]):
        assert_one_line_error(cli(*command, "--device", "cpu"), said, f"{RunLayout(tiny_run).checkpoint}")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: c.update(kernels=["attention"]), "kernels must be a mapping, got [\"attention\"]"),
        (lambda c: c.update(model=[1, 2]), "model must be a mapping"),
        (lambda c: c.update(eval_splits="heldout"), "eval_splits must be a list"),
        (lambda c: c["model"].update(bias="yes"), 'model setting bias must be bool, got "yes"'),
        (lambda c: c["model"].update(n_layer=1.5), "model setting n_layer must be int, got 1.5"),
        (lambda c: c["task_params"].update(length=10**9), "vocab ** length must stay below 2**62"),
        (lambda c: c["task_params"].update(length=5), "make a sort task of vocab_size 10, block_size 9"),
    ],
    ids=["kernels a list", "model a list", "splits a string", "a string for a bool", "a float for an int",
         "an absurd task size", "a task size not the model's"],
)  # fmt: skip
def test_a_config_field_of_the_wrong_type_or_size_is_one_line(cli, tiny_run, change, said):
    edit_config(tiny_run, change)
    for command in (["eval", tiny_run, "--limit", "10"], ["sample", tiny_run, "--prompt", "1234"]):
        assert_one_line_error(cli(*command, "--device", "cpu"), said)


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2"}, "RANK=0 and WORLD_SIZE=2 are set but MASTER_ADDR and MASTER_PORT not"),
        ({"RANK": "0", "WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not what torchrun sets (a whole number, 1 or more)"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "gpu0"}, "LOCAL_RANK='gpu0' is not what torchrun sets"),
        ({"RANK": "-1", "WORLD_SIZE": "1"}, "RANK='-1' is not what torchrun sets (a whole number, 0 or more)"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}, "RANK=2 is not below WORLD_SIZE=2"),
    ],
    ids=["no rendezvous", "not a number", "a device for a rank", "negative", "rank past the world"],
)
def test_torchruns_variables_left_or_malformed_are_one_line_and_nothing_is_written(
    cli, tmp_path, monkeypatch, variables, said
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    run_dir = tmp_path / "run"
    assert_one_line_error(cli(*TINY, "--out", run_dir), said, "start with torchrun, or unset")
    assert not run_dir.exists()


def test_serve_drops_a_head_record_whose_grid_is_not_numbers_and_opens_on_the_first_layer(tiny_run):
    heads = {"metric": "exact_match", "split": "heldout", "examples": 10, "baseline": 0.9, "step": 30,
             "zero": [["a", "b"]], "mean": [[0.1, 0.1]], "layer_zero": [0.1]}  # fmt: skip
    RunLayout(tiny_run).heads_ablation.write_text(json.dumps(heads))
    explorer = Explorer(tiny_run, torch.device("cpu"))
    assert "heads" not in explorer.summary["records"]
    assert explorer.summary["open"] == {"layer": 0, "head": 0, "by": "first layer"}


def test_a_viz_error_in_a_command_is_one_line(cli, tiny_run, monkeypatch):
    def bad_grid(*args, **kwargs):
        raise VizError("'zero' must be rows of numbers of equal length")

    monkeypatch.setattr("gpt_train.inspect_cli.save", bad_grid)
    result = cli("inspect", tiny_run, "heads", "--examples", "20", "--device", "cpu")
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert result.err.endswith("gpt-train: error: 'zero' must be rows of numbers of equal length\n")  # after the bar


@pytest.mark.parametrize(
    ("fill", "said"),
    [
        (0.0, "logit difference is 0 on clean and corrupted inputs alike: its answer does not depend on"),
        (float("nan"), "logit differences are not finite (clean nan, corrupted nan): its weights hold NaN or inf"),
    ],
    ids=["zero weights", "nan weights"],
)
def test_patching_a_model_with_nothing_to_restore_is_refused_in_words_and_writes_nothing(tiny_run, fill, said):
    config, model = load_run(tiny_run, "cpu")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(fill)
    layout = RunLayout(tiny_run)
    with pytest.raises(InspectError, match=re.escape(said)):
        inspect_patch(config.build_task(), model, torch.device("cpu"), 30, layout, "resid_pre", 50)
    assert not layout.patching("resid_pre").exists() and not layout.patching_picture("resid_pre").exists()
