"""Hostile inputs to the run directory, the settings and inspect: a read-only output folder, float settings
past float32, a record of a checkpoint that is not the final one, an --examples past the split, and a text
run whose corpus is gone. Each is one line (or the right result), and nothing already written is lost."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from train_helpers import TINY, assert_one_line_error

from gpt_train.config import RunConfig
from gpt_train.files import WriteError, write_atomically
from gpt_viz import RunLayout


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
