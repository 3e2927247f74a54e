"""shakespeare, the named case of text: loading (path, cache, verified download), its own split, windows,
the loss evaluation, and what its params record.

The tests run on generated random text; only the integration test reads the real corpus, from
the monorepo's shared data folder, and it never puts any of its text in this file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
from pathlib import Path
from urllib.error import URLError

import pytest
import torch

from gpt_core import IGNORE_INDEX
from gpt_tasks import ParamError, get_task, is_heldout
from gpt_tasks.builtin import shakespeare

CORPUS = Path(os.environ.get("GPT_DATA", "tinyshakespeare.txt"))
"""The real text, as the experiments find it: the file $GPT_DATA names (else tinyshakespeare.txt here)."""


def serve(payload: bytes):
    """A stand-in for urlopen that answers every request with `payload`."""

    def urlopen(url, timeout=None):
        assert url == shakespeare.CORPUS_URL and timeout
        return io.BytesIO(payload)

    return urlopen


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(ValueError, match=f"tiny-shakespeare file not found: {missing}"):
        get_task("shakespeare", data=str(missing))


def test_offline_without_a_path_says_how_to_supply_the_file(tmp_path):
    with pytest.raises(ValueError, match="--data PATH") as error:
        get_task("shakespeare")
    assert "--set data=PATH" in str(error.value) and "input.txt" in str(error.value)
    assert not (tmp_path / "xdg-cache" / "gpt-tasks" / "tinyshakespeare.txt").exists()


def test_cache_in_xdg_cache_home_is_used_without_the_network(tmp_path, corpus_file):
    cached = tmp_path / "xdg-cache" / "gpt-tasks" / "tinyshakespeare.txt"
    assert shakespeare.cache_path() == cached
    cached.parent.mkdir(parents=True)
    cached.write_bytes(corpus_file.read_bytes())
    assert get_task("shakespeare").vocab_size == len(set(corpus_file.read_text())) + 1  # and the unknown token


def test_download_with_the_wrong_sha256_is_refused_and_deleted(tmp_path, monkeypatch):
    monkeypatch.setattr(shakespeare, "urlopen", serve(b"not the corpus\n" * 1000))
    with pytest.raises(ValueError, match=f"expected {shakespeare.CORPUS_SHA256}"):
        get_task("shakespeare")
    assert list((tmp_path / "xdg-cache" / "gpt-tasks").iterdir()) == []  # neither the file nor a partial one


def test_verified_download_lands_in_the_cache(tmp_path, monkeypatch, corpus_file):
    payload = corpus_file.read_bytes()
    monkeypatch.setattr(shakespeare, "CORPUS_SHA256", hashlib.sha256(payload).hexdigest())
    monkeypatch.setattr(shakespeare, "urlopen", serve(payload))
    task = get_task("shakespeare")
    assert (tmp_path / "xdg-cache" / "gpt-tasks" / "tinyshakespeare.txt").read_bytes() == payload
    assert task.vocab_size == len(set(payload.decode())) + 1


@pytest.mark.parametrize("error", [URLError("no route to host"), TimeoutError("timed out"), ConnectionRefusedError()])
def test_network_errors_become_the_supply_it_yourself_error(monkeypatch, error):
    def fail(url, timeout=None):
        raise error

    monkeypatch.setattr(shakespeare, "urlopen", fail)
    with pytest.raises(ValueError, match="download failed.*--data PATH"):
        get_task("shakespeare")


def test_vocabulary_is_the_sorted_characters_then_the_unknown_token_and_round_trips(shakespeare_task, corpus_file):
    text = corpus_file.read_text()
    alphabet = "".join(sorted(set(text)))  # every character of the generated text is in a training chunk
    assert shakespeare_task.params.alphabet == alphabet and shakespeare_task.vocab_size == len(alphabet) + 1
    sample = text[1000:1100]
    assert shakespeare_task.decode(shakespeare_task.encode(sample)) == sample
    with pytest.raises(ValueError, match="not in the vocabulary: '~'"):
        shakespeare_task.encode("ab~")
    assert shakespeare_task.token_labels(shakespeare_task.encode("a\n ")) == ["a", "\\n", " "]


def test_batch_targets_are_the_next_characters_at_every_position(shakespeare_task, corpus_file):
    text = corpus_file.read_text()
    batch = shakespeare_task.batch(16, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.targets.shape == (16, 8)
    assert batch.inputs.dtype == batch.targets.dtype == torch.long
    assert (batch.targets != IGNORE_INDEX).all()
    for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        start = text.find(shakespeare_task.decode(inputs))
        assert shakespeare_task.decode(targets) == text[start + 1 : start + 9]


def test_evaluate_reports_loss_and_bits_per_char_and_byte(shakespeare_task, tiny_model):
    model = tiny_model(shakespeare_task)
    sampled = shakespeare_task.evaluate(model, "heldout", "cpu", limit=50)
    assert sampled["examples"] == 50
    assert sampled["loss"] == pytest.approx(math.log(shakespeare_task.vocab_size), abs=0.1)  # untrained
    assert sampled["bits_per_char"] == pytest.approx(sampled["loss"] / math.log(2))  # one character per token
    assert sampled["bits_per_byte"] == pytest.approx(sampled["bits_per_char"])  # ASCII: one byte per character
    assert shakespeare_task.evaluate(model, "heldout", "cpu", limit=50) == sampled  # a fixed sample


def test_full_evaluation_scores_every_character_of_each_heldout_chunk_but_the_first_once(shakespeare_task, tiny_model):
    chunks = shakespeare_task.chunks("heldout")
    windows = shakespeare_task.evaluation_windows("heldout", None)
    assert len(windows) == 4 * len(chunks)  # 31 targets per 32-character chunk, windows of 8
    assert shakespeare_task.scored_text(windows) == (31 * len(chunks), 31 * len(chunks))
    metrics = shakespeare_task.evaluate(tiny_model(shakespeare_task), "heldout", "cpu")
    assert metrics["examples"] == len(windows) and metrics["loss"] > 0


def test_learned_positions_cannot_evaluate_windows_longer_than_trained(shakespeare_task, tiny_model):
    model = tiny_model(shakespeare_task, block_size=7)  # the task's windows are 8 characters
    with pytest.raises(ValueError, match="each evaluation window needs 8 positions, longer than block_size 7"):
        shakespeare_task.evaluate(model, "heldout", "cpu", limit=4)


def test_prompts_encode_and_attention_examples_open_the_first_heldout_chunks(shakespeare_task, corpus_file):
    text = corpus_file.read_text()
    for prompt in shakespeare_task.example_prompts():
        shakespeare_task.encode(prompt)
    chunks = shakespeare_task.chunks("heldout")[:4].tolist()
    assert len(chunks) == 4
    assert shakespeare_task.attention_examples(4) == [text[chunk * 32 : chunk * 32 + 8] for chunk in chunks]


def recorded_params(task) -> dict:
    """The task's params as a run records them: dataclasses.asdict through JSON (config.json)."""
    return json.loads(json.dumps(dataclasses.asdict(task.params)))


def test_params_after_construction_hold_the_alphabet_and_the_corpus_sha256(small_corpus):
    task = get_task("shakespeare", data=str(small_corpus), chunk_size=32, block_size=8)
    assert task.params.alphabet == task.tokenizer.alphabet
    assert set(task.params.alphabet) <= set(small_corpus.read_text())
    assert task.params.corpus_sha256 == hashlib.sha256(small_corpus.read_bytes()).hexdigest()


def test_a_task_rebuilt_from_recorded_params_has_the_same_vocabulary_tokens_and_split(small_corpus):
    first = get_task("shakespeare", data=str(small_corpus), chunk_size=32, block_size=8)
    again = get_task("shakespeare", **recorded_params(first))
    assert again.params == first.params
    assert again.tokenizer.identity() == first.tokenizer.identity()
    assert again.cache.root == first.cache.root
    assert all(torch.equal(again.chunks(split), first.chunks(split)) for split in ("train", "heldout"))


def _append_xyz(text: str) -> str:
    return text + "XYZ"


def _swap_two_letters(text: str) -> str:
    i = next(i for i in range(100, len(text)) if text[i].isalpha() and text[i + 1].isalpha() and text[i] != text[i + 1])
    return text[:i] + text[i + 1] + text[i] + text[i + 2 :]


@pytest.mark.parametrize("edit", [_append_xyz, _swap_two_letters])
def test_a_corpus_changed_after_training_is_refused_in_one_line(small_corpus, edit):
    recorded = recorded_params(get_task("shakespeare", data=str(small_corpus), chunk_size=32, block_size=8))
    original = small_corpus.read_text()
    small_corpus.write_text(edit(original), encoding="utf-8")
    with pytest.raises(ValueError, match=r"the corpus at .* is not the text this run was trained on") as error:
        get_task("shakespeare", **recorded)
    message = str(error.value)
    assert "\n" not in message and recorded["corpus_sha256"] in message and str(small_corpus) in message


def test_a_given_alphabet_is_the_vocabulary_even_if_the_text_would_sort_differently(small_corpus):
    alphabet = "".join(sorted(set(small_corpus.read_text()), reverse=True))
    task = get_task("shakespeare", data=str(small_corpus), chunk_size=32, block_size=8, alphabet=alphabet)
    assert task.tokenizer.alphabet == task.params.alphabet == alphabet
    assert task.encode(alphabet[:3]) == [0, 1, 2]


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [("alphabet", "abca", "must not repeat"), ("corpus_sha256", "not-a-hash", "64 lowercase hex")],
)
def test_malformed_recorded_fields_are_refused(small_corpus, key, value, words):
    with pytest.raises(ParamError, match=words):
        get_task("shakespeare", data=str(small_corpus), chunk_size=32, block_size=8, **{key: value})


def test_too_short_a_text_for_both_splits_is_refused(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("abcdefghij" * 10)
    with pytest.raises(ValueError, match="no (training|held-out) chunk|holds out every chunk"):
        get_task("shakespeare", data=str(path))


def test_its_chunks_are_held_out_with_its_own_salt_not_texts(corpus_file):
    """shakespeare keeps the chunks it always held out; text on the same file holds out others."""
    shakespeare_task = get_task("shakespeare", data=str(corpus_file), chunk_size=32, block_size=8)
    text_task = get_task("text", data=str(corpus_file), chunk_size=32, block_size=8)
    text = corpus_file.read_text()
    expected = [i for i in range(6250) if is_heldout(text[32 * i : 32 * (i + 1)].encode(), 0.1, b"shakespeare")]
    assert shakespeare_task.chunks("heldout").tolist() == expected
    assert text_task.chunks("heldout").tolist() != expected


def test_bad_params_are_refused():
    with pytest.raises(ParamError, match="chunk_size"):
        get_task("shakespeare", block_size=64, chunk_size=64)


@pytest.mark.skipif(not CORPUS.is_file(), reason=f"tiny-shakespeare not present at {CORPUS} (set GPT_DATA)")
def test_the_real_corpus_has_65_characters_and_a_tenth_of_its_chunks_held_out():
    task = get_task("shakespeare", data=str(CORPUS))
    assert task.vocab_size == 65 + 1  # every character occurs in a training chunk; and the unknown token
    assert len(task.chunk_offsets) == 1090 and len(task.chunks("heldout")) == 109
    assert len(task.evaluation_windows("heldout", None)) == 1744  # 109 chunks of 1,023 targets, windows of 64
    assert len(task.attention_examples(1)[0]) == 64
    assert all(set(prompt) <= set(task.params.alphabet) for prompt in task.example_prompts())
