"""text: corpora (a file, or a directory through a glob), the token cache (reuse, invalidation, repair),
windows read from the memmap, metrics that compare across tokenizers, what a run records, and every bad
input as a one-line ValueError.

All corpora are generated here (random characters, or a few made-up sentences); nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import mmap
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import ParamError, get_task, is_heldout
from gpt_tasks.builtin.text import TextParams
from gpt_tasks.text.cache import META, TOKENS
from gpt_tasks.text.corpus import Corpus, chunks

pytest.importorskip("tokenizers", reason="the bpe extra (pip install 'gpt-tasks[bpe]') is not installed")

SMALL = {"chunk_size": 64, "block_size": 8}
WORDS = ["the", "night", "is", "young", "and", "so", "are", "we", "ünïcödé", "🎉", "naïve", "café", "日本"]


def sentences(n_words: int, seed: int = 0) -> str:
    """Made-up text with repeated words (so a BPE finds merges), non-ASCII letters and an emoji."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + ("\n" if rng.random() < 0.1 else "") for _ in range(n_words))


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(sentences(6000), encoding="utf-8")
    return path


def text_task(path: Path, **params):
    return get_task("text", data=str(path), **(SMALL | params))


def recorded(task) -> dict:
    """The task's params as a run records them (dataclasses.asdict through JSON, as config.json holds them)."""
    return json.loads(json.dumps(dataclasses.asdict(task.params)))


def is_mapped(tokens: np.ndarray) -> bool:
    """Whether `tokens` reads the file's pages through a memory map (rather than a copy in memory)."""
    return isinstance(getattr(tokens.base, "obj", None), mmap.mmap)


def cache_entries(tmp_path: Path) -> set[str]:
    root = tmp_path / "xdg-cache" / "gpt-tasks" / "text"
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "tokenizers"))}


# the corpus ---------------------------------------------------------------------------------------------
def test_a_directory_is_its_matching_files_in_sorted_order_joined_by_newlines(tmp_path):
    root = tmp_path / "notes"
    (root / "b").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "b" / "two.md").write_text("second")  # no final newline: one is added before the next file
    (root / "a.md").write_text("first\n")
    (root / "c.md").write_text("third")
    (root / "skip.txt").write_text("not markdown\n")
    (root / ".git" / "HEAD.md").write_text("hidden\n")
    corpus = Corpus.find(root, "**/*.md")
    assert [p.relative_to(root).as_posix() for p in corpus.files] == ["a.md", "b/two.md", "c.md"]
    assert "".join(corpus.texts()) == "first\nsecond\nthird"
    assert corpus.sha256() == hashlib.sha256(b"first\nsecond\nthird").hexdigest()


def test_each_files_leading_byte_order_mark_is_dropped_and_a_later_one_kept(tmp_path):
    """Editors that write a BOM put U+FEFF into the vocabulary and, in a directory, into the middle of the text."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.txt").write_bytes("\ufefffirst\n".encode())
    (root / "b.txt").write_bytes("\ufeffsecond \ufeff kept\n".encode())
    assert "".join(Corpus.find(root, "*.txt").texts()) == "first\nsecond \ufeff kept\n"


def test_a_file_with_a_byte_order_mark_trains_without_it_in_the_vocabulary(tmp_path):
    path = tmp_path / "bom.txt"
    text = sentences(3000)
    path.write_bytes(("\ufeff" + text).encode())
    task = text_task(path, tokenizer="char")
    assert "\ufeff" not in task.params.alphabet
    assert task.params.corpus_sha256 == hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_a_split_holding_out_every_chunk_says_so_before_learning_a_tokenizer(corpus, kind):
    """The char tokenizer said it "needs at least one character", the BPE that vocab_size must be at least 257."""
    one_line_error(lambda: text_task(corpus, tokenizer=kind, heldout_fraction=0.9999), "holds out every chunk")


def test_a_bpe_of_text_that_allows_no_merge_keeps_its_byte_tokens(tmp_path):
    path = tmp_path / "lines.txt"
    rng = random.Random(0)
    path.write_text("".join(rng.choice("abcdefghij") + "\n" for _ in range(20000)))
    assert text_task(path, tokenizer="bpe").vocab_size == 256


def test_a_single_files_corpus_hash_is_the_files_own_sha256(corpus):
    assert Corpus.find(corpus, "ignored").sha256() == hashlib.sha256(corpus.read_bytes()).hexdigest()


def test_chunks_are_exact_character_counts_whatever_the_pieces():
    text = sentences(500)
    pieces = [text[i : i + 37] for i in range(0, len(text), 37)]
    cut = list(chunks(pieces, 64))
    assert "".join(cut) == text and all(len(c) == 64 for c in cut[:-1]) and 0 < len(cut[-1]) <= 64


def test_a_multibyte_character_across_read_blocks_is_read_whole(tmp_path, monkeypatch):
    from gpt_tasks.text import corpus as corpus_module

    monkeypatch.setattr(corpus_module, "BLOCK", 3)  # every emoji straddles two blocks
    path = tmp_path / "emoji.txt"
    path.write_text("a🎉b🙂" * 5, encoding="utf-8")
    assert "".join(Corpus.find(path, "").texts()) == "a🎉b🙂" * 5


# bad input: one line each ----------------------------------------------------------------------------------
def one_line_error(make, *words: str) -> str:
    with pytest.raises(ValueError) as error:
        make()
    message = str(error.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def test_an_empty_file_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    one_line_error(lambda: text_task(tmp_path / "empty.txt"), "empty.txt", "is empty")


@pytest.mark.parametrize(
    ("payload", "words"),
    [
        (b"PNG\x89\x00\x01\x02binary" * 10, ("not UTF-8 text", "byte 3", "binary")),
        (b"text, then a NUL\x00 and more text" * 10, ("NUL", "binary")),
        ("é".encode()[:1], ("not UTF-8 text", "byte 0")),  # a file cut inside a character
    ],
)
def test_a_binary_file_is_refused_naming_it(tmp_path, payload, words):
    (tmp_path / "data.bin").write_bytes(payload)
    one_line_error(lambda: text_task(tmp_path / "data.bin"), "data.bin", *words)


def test_a_binary_file_in_a_directory_is_named(tmp_path):
    (tmp_path / "good.txt").write_text(sentences(3000))
    (tmp_path / "image.txt").write_bytes(b"\xff\xd8\xff\xe0 jpeg")
    one_line_error(lambda: text_task(tmp_path), "image.txt", "not UTF-8 text")


def test_a_directory_with_no_matching_text_is_refused(tmp_path):
    (tmp_path / "notes.md").write_text("markdown\n")
    one_line_error(lambda: text_task(tmp_path), "no file under", "'**/*.txt'")
    (tmp_path / "empty.txt").write_text("")
    one_line_error(lambda: text_task(tmp_path), "all empty")


def test_a_bad_glob_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    one_line_error(lambda: text_task(tmp_path, glob="/abs/*.txt"), "glob '/abs/*.txt'")


def test_a_link_to_nothing_that_matches_the_glob_is_refused_naming_it(tmp_path):
    """It was skipped without a word, where the text it pointed at would have been read."""
    (tmp_path / "a.txt").write_text(sentences(500))
    (tmp_path / "b.txt").symlink_to(tmp_path / "gone.txt")
    one_line_error(lambda: text_task(tmp_path), "b.txt matches glob", "is a link to nothing")


def test_a_directory_that_cannot_be_listed_is_refused_where_the_glob_reaches_it(tmp_path, monkeypatch):
    """Path.glob passes over a folder it may not list, and the folder's files with it: a run trained on part of
    the corpus without a word. Listing is refused here as a user without the permission is (root may list any)."""
    for name in ("a.txt", "closed/b.txt", ".hidden/c.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("some text to read\n")
    scandir = os.scandir

    def refusing(path=".", *args):
        if Path(path).name in ("closed", ".hidden"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path, *args)

    monkeypatch.setattr(os, "scandir", refusing)
    for glob in ("**/*.txt", "closed/*.txt", "*/b.txt", "c*/**/*.txt"):
        with pytest.raises(ValueError, match=rf"^cannot list {tmp_path / 'closed'} \(Permission denied\): its files"):
            Corpus.find(tmp_path, glob)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "d.txt").write_text("more text\n")
    for glob, found in (("*.txt", "a.txt"), ("data/*.txt", "data/d.txt"), ("d*/**/*.txt", "data/d.txt")):
        assert Corpus.find(tmp_path, glob).files == (tmp_path / found,)  # the glob never enters closed/


def test_a_missing_corpus_and_no_corpus_at_all_are_refused(tmp_path):
    one_line_error(lambda: text_task(tmp_path / "nowhere.txt"), "text corpus not found", "nowhere.txt")
    one_line_error(lambda: get_task("text"), "needs a corpus", "--data PATH")


@pytest.mark.parametrize("tokenizer", ["char", "byte", "bpe"])
def test_a_corpus_smaller_than_a_training_window_is_refused(tmp_path, tokenizer):
    (tmp_path / "tiny.txt").write_text("five!")
    one_line_error(lambda: text_task(tmp_path / "tiny.txt", tokenizer=tokenizer), "smaller than a training window")


def test_chunks_too_short_for_a_window_of_bpe_tokens_say_what_to_change(corpus):
    one_line_error(
        lambda: text_task(corpus, tokenizer="bpe", vocab_size=2000, block_size=60),
        "no chunk of 64 characters holds a window of 61 tokens",
        "raise chunk_size",
    )


def test_chunks_left_out_for_holding_too_few_bpe_tokens_are_counted_in_a_note(corpus, capsys):
    """A BPE at a block near its chunks' token counts trained and scored on a few chunks without a word."""
    task = text_task(corpus, tokenizer="bpe", vocab_size=300, block_size=30)
    kept = len(task.chunks("train")) + len(task.chunks("heldout"))
    total = len(task.cache.offsets) - 1
    said = capsys.readouterr().err
    assert 0 < kept < total - 1
    assert f"{total - kept:,} of {total:,} chunks (" in said and "a larger chunk_size keeps them" in said
    text_task(corpus, tokenizer="bpe", vocab_size=300, block_size=8)
    assert "neither trained on nor scored" not in capsys.readouterr().err  # at most the last chunk is short


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"tokenizer": "char", "vocab_size": 500}, "vocab_size belongs to tokenizer=bpe"),
        ({"tokenizer": "byte", "tokenizer_file": "t.json"}, "tokenizer_file belongs to tokenizer=bpe"),
        ({"tokenizer": "bpe", "alphabet": "abc"}, "alphabet belongs to tokenizer=char"),
        ({"tokenizer": "bpe", "vocab_size": 100}, "at least 257"),
        ({"tokenizer": "words"}, "tokenizer must be one of char, byte, bpe"),
        ({"chunk_size": 8}, "chunk_size (8) must be larger than block_size (8)"),
    ],
)
def test_inconsistent_parameters_are_refused(corpus, params, words):
    with pytest.raises(ParamError, match=words.replace("(", r"\(").replace(")", r"\)")):
        text_task(corpus, **params)


def test_text_params_built_directly_refuse_an_unknown_tokenizer():
    with pytest.raises(ValueError, match="tokenizer must be one of char, byte, bpe, got 'words'"):
        TextParams(tokenizer="words")


def test_a_missing_or_foreign_tokenizer_file_is_refused(corpus, tmp_path):
    one_line_error(lambda: text_task(corpus, tokenizer="bpe", tokenizer_file=str(tmp_path / "no.json")), "no.json")
    (tmp_path / "bad.json").write_text('{"not": "a tokenizer"}')
    one_line_error(lambda: text_task(corpus, tokenizer="bpe", tokenizer_file=str(tmp_path / "bad.json")), "bad.json")


def test_a_vocab_size_other_than_the_tokenizer_files_is_refused_not_ignored(corpus):
    trained = text_task(corpus, tokenizer="bpe", vocab_size=300)
    held = trained.params.vocab_size
    kept = {"tokenizer": "bpe", "tokenizer_file": trained.params.tokenizer_file}
    assert text_task(corpus, **kept, vocab_size=held).vocab_size == held  # what a run's config.json gives again
    one_line_error(lambda: text_task(corpus, **kept, vocab_size=1024), f"vocab_size 1,024 is not the {held} tokens")


def test_a_char_model_asked_for_a_character_it_never_saw_says_which(corpus):
    task = text_task(corpus)
    one_line_error(lambda: task.encode("the 🙂 café ẞ"), "not in the vocabulary", "'ẞ🙂'", "training chunks")
    assert task.decode(task.encode("the café")) == "the café"


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_byte_and_bpe_models_encode_any_prompt(corpus, tokenizer):
    task = text_task(corpus, tokenizer=tokenizer)
    assert task.decode(task.encode("the 🙂 ẞ unseen")) == "the 🙂 ẞ unseen"


def test_default_prompts_end_on_a_whole_character_where_byte_tokens_cut_one(tmp_path):
    path = tmp_path / "corpus.txt"
    rng = random.Random(0)
    text = "".join(rng.choice("日本語文字") for _ in range(6000))  # 3 bytes a character: 8 byte tokens cut one
    path.write_text(text, encoding="utf-8")
    task = text_task(path, tokenizer="byte")
    prompts = task.example_prompts() + task.attention_examples(3)
    assert len(prompts) == 4 and all(prompt and "\ufffd" not in prompt for prompt in prompts), prompts
    assert all(prompt in text for prompt in prompts)


# the token cache ---------------------------------------------------------------------------------------------
def test_preparation_says_where_the_cache_is_and_a_second_task_reuses_it(corpus, tmp_path, capsys, monkeypatch):
    first = text_task(corpus, tokenizer="bpe", vocab_size=300)
    said = capsys.readouterr().err
    assert f"preparing the token cache {first.cache.root}" in said and "token cache ready" in said
    assert first.cache.root.is_relative_to(tmp_path / "xdg-cache" / "gpt-tasks" / "text")
    assert is_mapped(first.cache.tokens) and first.cache.tokens.dtype == np.uint16

    from gpt_tasks.text import cache

    def never(*args, **kwargs):
        raise AssertionError("prepared again")

    monkeypatch.setattr(cache, "_build", never)
    monkeypatch.setattr("gpt_tasks.builtin.text.train_bpe", never)
    again = text_task(corpus, tokenizer="bpe", vocab_size=300)
    assert again.cache.root == first.cache.root and capsys.readouterr().err == ""
    assert again.tokenizer.identity() == first.tokenizer.identity()


def test_other_tokenizer_or_chunking_settings_are_other_cache_entries(corpus, tmp_path):
    settings = [
        {},
        {"tokenizer": "byte"},
        {"tokenizer": "bpe", "vocab_size": 300},
        {"tokenizer": "bpe", "vocab_size": 320},
        {"tokenizer": "bpe", "vocab_size": 300, "chunk_size": 128},
    ]
    roots = {text_task(corpus, **change).cache.root for change in settings}
    assert len(roots) == len(settings) == len(cache_entries(tmp_path))


def test_a_changed_corpus_is_a_new_entry_and_a_new_tokenizer(corpus, tmp_path):
    before = text_task(corpus, tokenizer="bpe", vocab_size=300)
    corpus.write_text(corpus.read_text() + " plus one more sentence\n", encoding="utf-8")
    after = text_task(corpus, tokenizer="bpe", vocab_size=300)
    assert after.cache.root != before.cache.root
    assert after.params.tokenizer_file != before.params.tokenizer_file
    assert len(cache_entries(tmp_path)) == 2


def test_the_heldout_fraction_reuses_the_entry_and_moves_only_the_split(corpus, tmp_path):
    ten = text_task(corpus, tokenizer="byte")
    thirty = text_task(corpus, tokenizer="byte", heldout_fraction=0.3)
    assert thirty.cache.root == ten.cache.root
    assert set(ten.chunks("heldout").tolist()) < set(thirty.chunks("heldout").tolist())


def test_a_damaged_entry_is_rebuilt(corpus):
    first = text_task(corpus)
    expected = np.array(first.cache.tokens)
    tokens = first.cache.root / TOKENS
    tokens.write_bytes(tokens.read_bytes()[:-2])  # a truncated token file
    again = text_task(corpus)
    assert np.array_equal(np.array(again.cache.tokens), expected)
    (again.cache.root / META).unlink()  # an entry never finished
    assert np.array_equal(np.array(text_task(corpus).cache.tokens), expected)


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_tokenizing_in_batches_of_a_few_chunks_caches_what_one_batch_does(corpus, tmp_path, monkeypatch, tokenizer):
    whole = text_task(corpus, tokenizer=tokenizer, cache_dir=str(tmp_path / "whole")).cache
    monkeypatch.setattr("gpt_tasks.text.cache.BATCH_CHARS", 3 * SMALL["chunk_size"])  # 3 chunks a batch
    batched = text_task(corpus, tokenizer=tokenizer, cache_dir=str(tmp_path / "batched")).cache
    assert len(whole.chars) > 100 and len(whole.chars) % 3  # many batches, the last one short
    for column in ("tokens", "offsets", "chars", "utf8_bytes", "hashes"):
        assert np.array_equal(np.asarray(getattr(batched, column)), np.asarray(getattr(whole, column))), column


def test_the_cache_holds_each_chunks_tokens_and_split_hash(corpus):
    task = text_task(corpus, tokenizer="bpe", vocab_size=300)
    text, cache = corpus.read_text(), task.cache
    for number in (0, 7, len(cache.chars) - 1):
        chunk = text[64 * number : 64 * (number + 1)]
        ids = np.asarray(cache.tokens[cache.offsets[number] : cache.offsets[number + 1]])
        assert np.array_equal(ids, task.tokenizer.encode(chunk))  # each chunk tokenized on its own
        assert (cache.chars[number], cache.utf8_bytes[number]) == (len(chunk), len(chunk.encode()))
        assert (cache.hashes[number] < 0.1) == is_heldout(chunk.encode(), 0.1, b"text")


def test_a_vocabulary_past_65536_ids_is_cached_as_uint32(tmp_path):
    letters = [chr(c) for c in range(0x100, 0x1_2000) if not 0xD800 <= c < 0xE000]  # 73,472 characters
    path = tmp_path / "wide.txt"
    path.write_text("".join(letters * 2), encoding="utf-8")
    task = get_task("text", data=str(path), chunk_size=2048, block_size=8)
    assert task.vocab_size > 1 << 16 and task.cache.tokens.dtype == np.uint32
    window = task.batch(1, torch.Generator().manual_seed(0)).inputs[0].tolist()
    assert task.decode(window) in "".join(letters * 2)


def test_in_memory_reads_the_same_windows_as_the_memmap(corpus):
    mapped, loaded = (
        text_task(corpus, tokenizer="bpe", vocab_size=300),
        text_task(corpus, tokenizer="bpe", vocab_size=300, in_memory=True),
    )
    assert is_mapped(mapped.cache.tokens) and not is_mapped(loaded.cache.tokens)
    a, b = (task.batch(32, torch.Generator().manual_seed(3)) for task in (mapped, loaded))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


# windows and metrics -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tokenizer", ["char", "byte", "bpe"])
def test_training_windows_lie_inside_training_chunks_and_read_the_cache(corpus, tokenizer, monkeypatch):
    task = text_task(corpus, tokenizer=tokenizer, **({"vocab_size": 300} if tokenizer == "bpe" else {}))
    starts = []
    gather = task._gather
    monkeypatch.setattr(task, "_gather", lambda at: starts.extend(at.tolist()) or gather(at))
    batch = task.batch(256, torch.Generator().manual_seed(1))
    assert batch.inputs.shape == batch.targets.shape == (256, 8) and (batch.targets != IGNORE_INDEX).all()
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    offsets, tokens, train = task.cache.offsets, np.asarray(task.cache.tokens), set(task.chunks("train").tolist())
    for start, inputs, targets in zip(starts, batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        chunk = int(np.searchsorted(offsets, start, side="right")) - 1
        assert chunk in train and start + 9 <= offsets[chunk + 1]  # the whole window inside one training chunk
        assert inputs + targets[-1:] == tokens[start : start + 9].tolist()
    assert len({int(np.searchsorted(offsets, s, side="right")) for s in starts}) > 50  # many chunks drawn


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_evaluation_scores_every_token_of_each_heldout_chunk_but_the_first_once(corpus, tokenizer):
    task = text_task(corpus, tokenizer=tokenizer, **({"vocab_size": 300} if tokenizer == "bpe" else {}))
    windows = task.evaluation_windows("heldout", None)
    batch = task.window_batch(windows)
    scored = [int(w[0]) + 1 + t for w, row in zip(windows, batch.targets, strict=True) for t in range(8)
              if row[t] != IGNORE_INDEX]  # fmt: skip
    chunks_ = task.chunks("heldout").tolist()
    expected = [p for c in chunks_ for p in range(task.cache.offsets[c] + 1, task.cache.offsets[c + 1])]
    assert sorted(scored) == expected  # each once
    chars, size = task.scored_text(windows)
    first = [int(task.cache.tokens[task.cache.offsets[c]]) for c in chunks_]
    counts_chars, counts_bytes = task.char_counts, task.byte_counts
    assert chars == sum(int(task.cache.chars[c]) - int(counts_chars[f]) for c, f in zip(chunks_, first, strict=True))
    assert size == sum(
        int(task.cache.utf8_bytes[c]) - int(counts_bytes[f]) for c, f in zip(chunks_, first, strict=True)
    )


def test_bits_per_char_and_byte_are_the_total_bits_over_the_scored_text(corpus, tiny_model):
    task = text_task(corpus, tokenizer="bpe", vocab_size=300)
    model = tiny_model(task)
    metrics = task.evaluate(model, "heldout", "cpu")
    windows = task.evaluation_windows("heldout", None)
    batch = task.window_batch(windows)
    with torch.no_grad():
        logits = model(batch.inputs).logits
    total = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="sum")
    chars, size = task.scored_text(windows)
    assert metrics["bits_per_char"] == pytest.approx(float(total) / math.log(2) / chars, rel=1e-5)
    assert metrics["bits_per_byte"] == pytest.approx(float(total) / math.log(2) / size, rel=1e-5)
    assert metrics["loss"] == pytest.approx(float(total) / int((batch.targets != IGNORE_INDEX).sum()), rel=1e-5)
    assert metrics["examples"] == len(windows)


def test_every_tokenizer_holds_out_the_same_chunks(corpus):
    held = {t: text_task(corpus, tokenizer=t).chunks("heldout").tolist() for t in ("char", "byte", "bpe")}
    assert held["char"] == held["byte"] == held["bpe"] and held["char"]


def corpus_with_a_rare_character(path: Path, at: int) -> tuple[Path, int, str]:
    """Write a corpus at `path` in which character `at` of the first chunk that can stay held out is one no
    training chunk has; returns the path, that chunk's number and the character."""
    text = sentences(6000)
    edits = ((c, rare) for c in range(len(text) // 64) for rare in "ẞΩЖ")
    chunk, rare = next(
        (c, rare) for c, rare in edits
        if is_heldout((text[64 * c : 64 * c + at] + rare + text[64 * c + at + 1 : 64 * c + 64]).encode(), 0.1, b"text")
    )  # fmt: skip
    path.write_text(text[: 64 * chunk + at] + rare + text[64 * chunk + at + 1 :])
    return path, chunk, rare


def test_a_chars_heldout_text_may_hold_unknown_characters_which_are_scored_not_dropped(tmp_path):
    """Put a character no training chunk has into a held-out chunk (choosing one that keeps it held out)."""
    path, chunk, rare = corpus_with_a_rare_character(tmp_path / "c.txt", at=10)
    task = text_task(path)
    assert chunk in task.chunks("heldout").tolist() and rare not in task.params.alphabet
    ids = np.asarray(task.cache.tokens[task.cache.offsets[chunk] : task.cache.offsets[chunk + 1]])
    assert ids[10] == task.tokenizer.unknown_id  # kept in the held-out text, where the model is scored on it
    assert int(task.chunks("heldout")[0]) == chunk  # the first held-out chunk, yet
    assert rare not in task.attention_examples(1)[0]  # the pictures' example is one the vocabulary can encode
    task.encode(task.attention_examples(1)[0])


def test_attention_examples_pass_over_a_heldout_opening_the_vocabulary_cannot_encode(tmp_path):
    path, chunk, rare = corpus_with_a_rare_character(tmp_path / "c.txt", at=2)  # inside the first 8 tokens
    task = text_task(path)
    heldout = task.chunks("heldout").tolist()
    assert heldout[0] == chunk and task.block_size == 8
    openings = [task.decode(task.cache.tokens[start : start + 8].tolist()) for start in task.cache.offsets[:-1]]
    assert rare not in task.params.alphabet and task.tokenizer.unknown_characters(openings[chunk])
    assert task.attention_examples(3) == [openings[c] for c in heldout[1:4]]


# what a run records --------------------------------------------------------------------------------------
def test_a_task_rebuilt_from_recorded_params_is_the_same_without_preparing_again(corpus, capsys):
    for tokenizer in ("char", "byte", "bpe"):
        first = text_task(corpus, tokenizer=tokenizer)
        capsys.readouterr()
        again = get_task("text", **recorded(first))
        assert again.params == first.params and again.cache.root == first.cache.root
        assert again.tokenizer.identity() == first.tokenizer.identity()
        assert capsys.readouterr().err == ""


def test_bpe_records_its_vocabulary_size_and_hands_its_file_to_the_trainer(corpus):
    """The size the BPE holds, not the one asked for: a small corpus gives fewer merges than the default 1,024."""
    task = text_task(corpus, tokenizer="bpe")
    assert task.params.vocab_size == task.vocab_size < 1024 and Path(task.params.tokenizer_file).is_file()
    given = text_task(corpus, tokenizer="bpe", tokenizer_file=task.params.tokenizer_file)
    assert given.params.vocab_size == given.vocab_size == task.vocab_size  # the file's
    assert task.files() == {"tokenizer_file": Path(task.params.tokenizer_file).read_bytes()}
    assert text_task(corpus).files() == {} and text_task(corpus, tokenizer="byte").files() == {}


def test_a_bpe_file_given_is_used_as_it_is(corpus, tmp_path):
    trained = text_task(corpus, tokenizer="bpe", vocab_size=300)
    kept = tmp_path / "kept.json"
    kept.write_bytes(trained.files()["tokenizer_file"])
    other = tmp_path / "other.txt"
    other.write_text(sentences(4000, seed=5))
    task = text_task(other, tokenizer="bpe", tokenizer_file=str(kept))
    assert task.tokenizer.identity() == trained.tokenizer.identity() and task.params.tokenizer_file == str(kept)


@pytest.mark.parametrize("setting", ["padding", "truncation"])
def test_a_bpe_file_that_would_pad_or_cut_what_it_encodes_is_refused(corpus, tmp_path, setting):
    """Taken as it was, it padded every chunk of a batch to the longest (the padding trained on and scored) or cut each
    to its first tokens."""
    import tokenizers

    hf = tokenizers.Tokenizer.from_str(text_task(corpus, tokenizer="bpe", vocab_size=300).tokenizer.data.decode())
    if setting == "padding":
        hf.enable_padding(pad_id=0, pad_token="!")
    else:
        hf.enable_truncation(max_length=10)
    (tmp_path / "t.json").write_text(hf.to_str())
    one_line_error(
        lambda: text_task(corpus, tokenizer="bpe", tokenizer_file=str(tmp_path / "t.json")),
        f"the tokenizer has {setting} turned on",
    )


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_a_corpus_changed_after_training_is_refused_in_one_line(corpus, tokenizer):
    params = recorded(text_task(corpus, tokenizer=tokenizer))
    corpus.write_text(corpus.read_text() + "!", encoding="utf-8")
    message = one_line_error(lambda: get_task("text", **params), "is not the text this run was trained on")
    assert params["corpus_sha256"] in message and str(corpus) in message


def test_token_labels_escape_whitespace_and_show_partial_characters_as_bytes(corpus):
    byte_task = text_task(corpus, tokenizer="byte")
    assert byte_task.token_labels(byte_task.encode("a\n\t🎉")) == [
        "a",
        "\\n",
        "\\t",
        "\\xf0",
        "\\x9f",
        "\\x8e",
        "\\x89",
    ]


def test_token_labels_show_invisible_characters_as_their_escapes(tmp_path):
    invisible = "\u2028\u2029\u202e\u200f\x01\xa0"  # separators, direction marks, a control, no-break space
    text = "".join(part + invisible for part in sentences(6000).split(". "))  # in every chunk, trained on
    (tmp_path / "invisible.txt").write_text(text, encoding="utf-8")
    task = text_task(tmp_path / "invisible.txt", tokenizer="char")
    labels = task.token_labels(task.encode(invisible))
    assert labels == ["\\u2028", "\\u2029", "\\u202e", "\\u200f", "\\x01", "\\xa0"]


# hostile caches and corpora -----------------------------------------------------------------------------
def edit_after_hashing(monkeypatch, edited: str) -> None:
    """Make the corpus change right after it is hashed, as an editor saving it mid-preparation would."""
    hashed = Corpus.sha256

    def hash_then_edit(self, *args, **kwargs):
        digest = hashed(self, *args, **kwargs)
        self.files[0].write_text(edited, encoding="utf-8")
        return digest

    monkeypatch.setattr(Corpus, "sha256", hash_then_edit)


@pytest.mark.parametrize(
    ("tokenizer", "doing"), [("byte", "tokenized"), ("char", "learned from"), ("bpe", "learned from")]
)
def test_a_corpus_edited_while_it_is_prepared_is_refused_and_nothing_is_cached(
    corpus, tmp_path, monkeypatch, tokenizer, doing
):
    original = corpus.read_text(encoding="utf-8")
    with monkeypatch.context() as patched:
        edit_after_hashing(patched, "ZZZZ qqqq " * 2000)
        with pytest.raises(ValueError, match=f"the corpus changed while it was {doing}"):
            text_task(corpus, tokenizer=tokenizer)
    root = tmp_path / "xdg-cache" / "gpt-tasks" / "text"
    assert not root.exists() or (cache_entries(tmp_path) == set() and not any((root / "tokenizers").glob("*")))
    corpus.write_text(original, encoding="utf-8")
    task = text_task(corpus, tokenizer=tokenizer)
    assert "ZZZZ" not in task.decode(np.asarray(task.cache.tokens).tolist())


def tampered(task, change) -> None:
    """Rewrite the entry's token file or tables in place with `change`, sizes kept."""
    root = task.cache.root
    tokens = np.fromfile(root / TOKENS, dtype=task.cache.tokens.dtype)
    with np.load(root / "chunks.npz") as saved:
        tables = {name: saved[name].copy() for name in saved.files}
    change(tokens, tables)
    tokens.tofile(root / TOKENS)
    np.savez(root / "chunks.npz", **tables)


def reorder_offsets(tokens, tables):
    tables["offsets"][1], tables["offsets"][2] = tables["offsets"][2], tables["offsets"][1]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda tokens, tables: tokens.fill(0xFFFF), "checksum"),
        (lambda tokens, tables: tokens.__setitem__(slice(0, 2), tokens[1::-1].copy()), "checksum"),
        (reorder_offsets, "chunk offsets are not in order"),
        (lambda tokens, tables: tables["offsets"].__setitem__(-1, 10**9), "chunk offsets"),
        (lambda tokens, tables: tables["hashes"].fill(0.5), "checksum"),
        (lambda tokens, tables: tables["hashes"].__setitem__(0, 7.0), "split hashes"),
    ],
)
def test_an_entry_whose_contents_are_wrong_is_rebuilt_before_it_is_used(corpus, capsys, change, reason):
    first = text_task(corpus, tokenizer="byte")
    expected, heldout = np.array(first.cache.tokens), first.chunks("heldout").tolist()
    tampered(first, change)
    capsys.readouterr()
    again = text_task(corpus, tokenizer="byte")
    said = capsys.readouterr().err
    assert "is damaged" in said and reason in said and "rebuilding it" in said
    assert np.array_equal(np.array(again.cache.tokens), expected) and again.chunks("heldout").tolist() == heldout


def test_an_entry_with_ids_past_the_vocabulary_and_a_matching_checksum_is_rebuilt(corpus, capsys):
    first = text_task(corpus, tokenizer="byte")
    expected = np.array(first.cache.tokens)
    tampered(first, lambda tokens, tables: tokens.fill(300))
    meta = json.loads((first.cache.root / META).read_text())
    digest = hashlib.sha256((first.cache.root / TOKENS).read_bytes())
    with np.load(first.cache.root / "chunks.npz") as saved:
        for name in ("offsets", "chars", "bytes", "hashes"):
            digest.update(saved[name].tobytes())
    (first.cache.root / META).write_text(json.dumps(meta | {"sha256": digest.hexdigest()}))
    again = text_task(corpus, tokenizer="byte")
    assert "id 300 is past the vocabulary of 256" in capsys.readouterr().err
    assert np.array_equal(np.array(again.cache.tokens), expected)


def test_an_entry_made_from_another_corpus_under_this_key_is_never_used(corpus, tmp_path, capsys):
    first = text_task(corpus, tokenizer="byte")
    meta = json.loads((first.cache.root / META).read_text())
    (first.cache.root / META).write_text(json.dumps(meta | {"corpus_sha256": "0" * 64}))
    text_task(corpus, tokenizer="byte")
    assert "made from corpus_sha256" in capsys.readouterr().err


def dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_preparations_temporaries_are_removed_at_the_next_start_and_a_live_ones_kept(corpus, tmp_path):
    import os
    import socket

    root = tmp_path / "xdg-cache" / "gpt-tasks" / "text"
    (root / "tokenizers").mkdir(parents=True)
    host = socket.gethostname()
    dead = root / f".0123abcd.tmp-{host}-{dead_pid()}.k3x_9a2b"
    live = root / f".0123abcd.tmp-{host}-{os.getppid()}.abcdefgh"
    elsewhere = root / f".0123abcd.tmp-another-host-{dead_pid()}.abcdefgh"
    for folder in (dead, live, elsewhere):
        (folder / TOKENS).parent.mkdir()
        (folder / TOKENS).write_bytes(b"\0" * 64)
    partial = root / "tokenizers" / f".key.char.tmp-{host}-{dead_pid()}"
    partial.write_text("abc")
    text_task(corpus)
    assert not dead.exists() and not partial.exists()
    assert live.exists() and elsewhere.exists()


def test_a_bpe_vocabulary_larger_than_the_corpus_can_give_is_refused_before_learning(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text(sentences(300))
    size = path.stat().st_size
    with pytest.raises(ValueError, match=f"vocab_size 1,000,000,000 is more than the corpus can give.*{size:,} bytes"):
        text_task(path, tokenizer="bpe", vocab_size=10**9)
    assert text_task(path, tokenizer="bpe", vocab_size=256 + size - 1).vocab_size <= 256 + size - 1


def test_a_fifo_as_the_corpus_is_named_as_such(tmp_path):
    import os

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file or a directory"):
        text_task(fifo)
