"""Text runs through the CLI: a task's files (a trained BPE) are kept in the run directory and used by eval,
sample and --resume wherever the directory goes; a directory corpus; every bad text input is one line,
with nothing written."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from train_helpers import assert_one_line_error

from gpt_viz import RunLayout

pytest.importorskip("tokenizers", reason="the bpe extra (pip install 'gpt-tasks[bpe]') is not installed")

WORDS = ["the", "night", "is", "young", "and", "so", "are", "we", "naïve", "café", "🎉"]
SMALL = (
    "--device", "cpu", "--quiet", "--steps", "4", "--set", "block_size=16", "--set", "chunk_size=128",
    "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set", "eval_every=2",
    "--set", "eval_limit=8", "--set", "checkpoint_every=2",
)  # fmt: skip


def write_corpus(path: Path, n_words: int = 4000, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(n_words)) + "\n", encoding="utf-8")
    return path


def bpe_run(cli, tmp_path: Path, *extra: str) -> Path:
    corpus, run_dir = write_corpus(tmp_path / "corpus.txt"), tmp_path / "run"
    result = cli(
        "run", "--task", "text", "--data", corpus, *SMALL, "--set", "tokenizer=bpe", "--set", "vocab_size=300",
        "--out", run_dir, *extra,
    )  # fmt: skip
    assert result.code == 0, result.err
    return run_dir


def test_a_bpe_run_keeps_its_tokenizer_and_eval_and_sample_use_it_after_the_run_moves(cli, tmp_path):
    run_dir = bpe_run(cli, tmp_path)
    layout = RunLayout(run_dir)
    config = json.loads(layout.config.read_text())
    assert config["task_files"] == ["tokenizer_file"]
    assert config["task_params"]["tokenizer_file"] == "task.tokenizer_file"
    kept = json.loads(layout.task_file("tokenizer_file").read_text())
    assert len(kept["model"]["vocab"]) == 300
    assert layout.task_file("tokenizer_file") in layout.existing()

    moved = tmp_path / "elsewhere" / "run"
    shutil.move(run_dir, moved)
    shutil.rmtree(tmp_path / "xdg-cache" / "gpt-tasks" / "text" / "tokenizers")  # only the run's copy is left
    final = json.loads(RunLayout(moved).final.read_text())
    metrics = json.loads(cli("eval", moved, "--json").out)
    assert metrics["bits_per_char"] == pytest.approx(final["heldout_bits_per_char"])
    assert metrics["bits_per_byte"] == pytest.approx(final["heldout_bits_per_byte"])
    sampled = cli("sample", moved, "--prompt", "the café 🎉 ẞ", "--max-new-tokens", "5")
    assert sampled.code == 0 and sampled.out.startswith("the café 🎉 ẞ -> ")

    for setting in ("vocab_size=400", "tokenizer=byte", "chunk_size=512", "heldout_fraction=0.5", "corpus_sha256="):
        refused = cli("eval", moved, "--set", setting)  # vocab_size=400 was ignored; the others changed the split
        # (an empty corpus_sha256 checked no corpus: another text's held-out chunks lay in this one's training text)
        assert refused.code != 0 and f"cannot change {setting.split('=')[0]} of a trained text run" in refused.err
    assert cli("eval", moved, "--set", "block_size=16").code == 0


def test_resume_of_a_bpe_run_uses_the_kept_tokenizer(cli, tmp_path):
    run_dir = bpe_run(cli, tmp_path)
    config = json.loads(RunLayout(run_dir).config.read_text())
    config["train"]["steps"] = 6
    RunLayout(run_dir).config.write_text(json.dumps(config))
    shutil.rmtree(tmp_path / "xdg-cache")
    assert cli("run", "--resume", run_dir, "--quiet").code == 0
    assert json.loads(RunLayout(run_dir).final.read_text())["step"] == 6


def test_force_replaces_a_runs_task_files_with_the_new_runs(cli, tmp_path):
    run_dir = bpe_run(cli, tmp_path)
    corpus = tmp_path / "corpus.txt"
    result = cli("run", "--task", "text", "--data", corpus, *SMALL, "--out", run_dir, "--force")
    assert result.code == 0, result.err
    assert not RunLayout(run_dir).task_file("tokenizer_file").exists()  # a char run keeps no file
    assert json.loads(RunLayout(run_dir).config.read_text())["task_files"] == []


def test_a_directory_corpus_with_a_glob_trains(cli, tmp_path):
    notes = tmp_path / "notes"
    for i in range(3):
        (notes / f"sub{i}").mkdir(parents=True)
        write_corpus(notes / f"sub{i}" / f"note{i}.md", n_words=800, seed=i)
    result = cli("run", "--task", "text", "--data", notes, "--set", "glob=**/*.md", *SMALL, "--out", tmp_path / "r")
    assert result.code == 0, result.err
    assert "heldout_bits_per_char" in json.loads((tmp_path / "r" / RunLayout.FINAL).read_text())


def test_a_corpus_named_by_a_relative_set_data_is_found_from_any_directory(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus.txt")
    assert cli("run", "--task", "text", "--set", "data=corpus.txt", *SMALL, "--out", "r").code == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["task_params"]["data"] == str(
        tmp_path / "corpus.txt"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    evaluated = cli("eval", "../r", "--limit", "8", "--device", "cpu")
    assert evaluated.code == 0, evaluated.err
    both = cli("run", "--task", "text", "--data", "../corpus.txt", "--set", "data=../corpus.txt", *SMALL)
    assert_one_line_error(both, "--data and --set data both name the corpus; give it once")
    monkeypatch.setenv("HOME", str(tmp_path))  # a ~ the shell left unexpanded (in quotes, in a script)
    assert cli("eval", "../r", "--limit", "8", "--device", "cpu", "--set", "data=~/corpus.txt").code == 0


def test_a_relative_cache_dir_is_recorded_absolute_so_eval_elsewhere_reuses_the_cache(cli, tmp_path, monkeypatch):
    """Recorded as given, it named another folder from eval's directory, which tokenized the corpus again there."""
    monkeypatch.chdir(tmp_path)
    corpus = write_corpus(tmp_path / "corpus.txt")
    assert cli("run", "--task", "text", "--data", corpus, "--set", "cache_dir=cache", *SMALL, "--out", "r").code == 0
    params = json.loads((tmp_path / "r" / "config.json").read_text())["task_params"]
    assert params["cache_dir"] == str(tmp_path / "cache")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    evaluated = cli("eval", "../r", "--limit", "8", "--device", "cpu")
    assert evaluated.code == 0 and "preparing" not in evaluated.err, evaluated.err
    assert list((tmp_path / "elsewhere").iterdir()) == []


def empty_file(folder: Path) -> Path:
    (folder / "empty.txt").write_text("")
    return folder / "empty.txt"


def binary_file(folder: Path) -> Path:
    (folder / "x.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    return folder / "x.bin"


def folder_without_text(folder: Path) -> Path:
    (folder / "n.md").write_text("notes")
    return folder


def tiny_file(folder: Path) -> Path:
    (folder / "tiny.txt").write_text("tiny")
    return folder / "tiny.txt"


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (empty_file, ("empty.txt", "is empty")),
        (binary_file, ("x.bin", "binary")),
        (folder_without_text, ("no file under", "'**/*.txt'")),
        (tiny_file, ("smaller than a training window",)),
    ],
)
def test_bad_text_input_is_one_line_and_writes_no_run(cli, tmp_path, make, fragments):
    data = tmp_path / "data"
    data.mkdir()
    result = cli("run", "--task", "text", "--data", make(data), *SMALL, "--out", tmp_path / "run")
    assert_one_line_error(result, "task 'text'", *fragments)
    assert not (tmp_path / "run").exists()


def test_bpe_asked_of_a_char_setting_is_one_line(cli, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt")
    result = cli("run", "--task", "text", "--data", corpus, "--set", "vocab_size=500", "--out", tmp_path / "run")
    assert_one_line_error(result, "vocab_size belongs to tokenizer=bpe")
    assert not (tmp_path / "run").exists()


def test_a_char_model_asked_to_sample_a_character_it_never_saw_is_one_line(cli, tmp_path):
    corpus, run_dir = write_corpus(tmp_path / "c.txt"), tmp_path / "run"
    assert cli("run", "--task", "text", "--data", corpus, *SMALL, "--out", run_dir).code == 0
    before = sorted((p.name, p.read_bytes()) for p in run_dir.iterdir())
    assert_one_line_error(cli("sample", run_dir, "--prompt", "the ẞ"), "prompt 'the ẞ'", "not in the vocabulary", "'ẞ'")
    assert sorted((p.name, p.read_bytes()) for p in run_dir.iterdir()) == before


def char_run(cli, tmp_path: Path) -> Path:
    corpus, run_dir = write_corpus(tmp_path / "c.txt"), tmp_path / "run"
    assert cli("run", "--task", "text", "--data", corpus, *SMALL, "--out", run_dir).code == 0
    return run_dir


def test_a_prompt_longer_than_the_block_is_noted_and_answered_with_half_a_block(cli, tmp_path):
    """It was cut without a word, and the default answer was one token."""
    sampled = cli("sample", char_run(cli, tmp_path), "--prompt", "the night " * 5)  # 50 characters, block 16
    assert sampled.code == 0 and "note: the prompt is 50 tokens; the model reads its last 16" in sampled.err
    assert len(sampled.out.rstrip("\n").split(" -> ", 1)[1]) == 8


def test_each_prompts_sample_depends_on_the_seed_alone_not_on_the_prompts_before_it(cli, tmp_path):
    run_dir = char_run(cli, tmp_path)
    sample = ("sample", run_dir, "--temperature", "1", "--seed", "3", "--max-new-tokens", "30")
    both = cli(*sample, "--prompt", "the", "--prompt", "we").out.splitlines()
    assert both[1] == cli(*sample, "--prompt", "we").out.strip()


def test_two_prompts_sampled_with_one_seed_draw_different_numbers(cli, tmp_path, monkeypatch):
    """Each prompt's generator had the seed itself: two prompts drew the same numbers, their samples alike (the same
    first token 94% of the time where 26% was their chance)."""
    import gpt_train.cli.trained as trained

    seeds, generate = [], trained.generate
    monkeypatch.setattr(trained, "generate", lambda *a, generator, **k: seeds.append(generator.initial_seed())
                        or generate(*a, generator=generator, **k))  # fmt: skip
    run_dir = char_run(cli, tmp_path)
    sample = ("sample", run_dir, "--temperature", "1", "--seed", "3", "--max-new-tokens", "2")
    assert cli(*sample, "--prompt", "the", "--prompt", "we", "--prompt", "the").code == 0
    assert len(set(seeds)) == 3  # a prompt given again draws another sample
    assert cli(*sample, "--prompt", "the", "--prompt", "the").code == 0
    assert seeds[3:] == [seeds[0], seeds[2]]  # the same prompts and seed: the same samples


def test_top_k_at_temperature_zero_is_noted_as_having_no_effect(cli, tmp_path):
    sampled = cli("sample", char_run(cli, tmp_path), "--prompt", "the", "--top-k", "3")
    assert sampled.code == 0 and "--top-k has no effect at temperature 0" in sampled.err
