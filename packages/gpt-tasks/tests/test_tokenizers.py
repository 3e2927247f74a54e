"""Tokenizers of the text tasks: every one gives back the text it encodes (non-ASCII and emoji included), counts
the characters and bytes its tokens stand for, and is rebuilt exactly from what it serializes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from gpt_tasks.text.tokenizer import (
    BPE_EXTRA,
    BpeTokenizer,
    ByteTokenizer,
    CharTokenizer,
    byte_alphabet,
    learn_alphabet,
    load_tokenizer,
    token_sizes,
    train_bpe,
)

tokenizers = pytest.importorskip("tokenizers", reason="the bpe extra (pip install 'gpt-tasks[bpe]') is not installed")

TEXTS = [
    "plain ASCII, with punctuation: a-b_c!",
    "Ünïcödé façade, naïve café; Ελληνικά, русский, 日本語のテキスト",
    "emoji 🎉🙂👍🏽 and a family 👨‍👩‍👧 (joined by zero-width joiners)",
    "combining e\u0301 vs é, tabs\tand\r\nCRLF lines\n\n  indented  twice  ",
    "🎉",
]
TRAINING_TEXT = ("The quick brown fox jumps over the lazy dog. " * 20 + "".join(TEXTS)) * 5


@pytest.fixture(scope="module")
def bpe() -> BpeTokenizer:
    return train_bpe([TRAINING_TEXT], vocab_size=300)


def every_tokenizer(bpe: BpeTokenizer):
    return [CharTokenizer(learn_alphabet(TEXTS)), ByteTokenizer(), bpe]


@pytest.mark.parametrize("text", TEXTS)
def test_every_tokenizer_gives_back_the_text_it_encodes(bpe, text):
    for tokenizer in every_tokenizer(bpe):
        ids = tokenizer.encode(text)
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < tokenizer.vocab_size
        assert tokenizer.decode(ids.tolist()) == text, tokenizer.kind


@pytest.mark.parametrize("text", TEXTS)
def test_token_sizes_add_up_to_the_characters_and_bytes_of_the_text(bpe, text):
    """Even where a byte-level token holds part of a character: it counts the characters it starts."""
    for tokenizer in every_tokenizer(bpe):
        chars, sizes = token_sizes(tokenizer)
        ids = tokenizer.encode(text)
        assert (chars[ids].sum(), sizes[ids].sum()) == (len(text), len(text.encode())), tokenizer.kind


def test_byte_tokens_split_an_emoji_into_four_tokens_of_which_one_starts_a_character():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode("🎉")
    chars, sizes = token_sizes(tokenizer)
    assert ids.tolist() == list("🎉".encode()) and chars[ids].tolist() == [1, 0, 0, 0]
    assert tokenizer.decode(ids[:2].tolist()) == "\ufffd"  # half a character is not text


def test_char_tokenizer_maps_unseen_characters_to_its_unknown_token():
    tokenizer = CharTokenizer("abc")
    assert tokenizer.vocab_size == 4 and tokenizer.unknown_id == 3
    assert tokenizer.encode("abzcé").tolist() == [0, 1, 3, 2, 3]
    assert tokenizer.decode([0, 3, 2]) == "a\ufffdc"
    assert tokenizer.unknown_characters("abzcéz") == "zé"
    chars, sizes = token_sizes(tokenizer)
    assert (chars[3], sizes[3]) == (1, 3)  # counted as the U+FFFD it decodes to


def test_char_tokenizer_keeps_a_given_order():
    tokenizer = CharTokenizer("cab")
    assert tokenizer.encode("abc").tolist() == [1, 2, 0]


def test_learn_alphabet_is_the_sorted_distinct_characters():
    assert learn_alphabet(["banana", "🎉a\n"]) == "".join(sorted(set("banana🎉a\n")))


def test_bpe_has_the_256_byte_symbols_and_learned_merges(bpe):
    assert bpe.vocab_size == 300
    table = bpe.token_bytes()
    assert {bytes([b]) for b in range(256)} <= set(table)
    assert len(bpe.encode(TRAINING_TEXT)) < len(TRAINING_TEXT.encode()) / 2  # merges shorten the text


def test_byte_alphabet_is_hugging_faces():
    assert set(byte_alphabet()) == set(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    assert sorted(byte_alphabet().values()) == list(range(256))


def test_bpe_training_is_deterministic(bpe):
    assert train_bpe([TRAINING_TEXT], vocab_size=300).serialize() == bpe.serialize()


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_a_serialized_tokenizer_loads_back_identical(bpe, kind):
    tokenizer = next(t for t in every_tokenizer(bpe) if t.kind == kind)
    again = load_tokenizer(kind, tokenizer.serialize())
    assert again.identity() == tokenizer.identity()
    assert all(np.array_equal(again.encode(text), tokenizer.encode(text)) for text in TEXTS)


def test_identities_differ_between_tokenizers(bpe):
    identities = {t.identity() for t in every_tokenizer(bpe)} | {CharTokenizer("ab").identity()}
    assert len(identities) == 4


def test_text_that_is_not_utf8_is_a_value_error_from_every_tokenizer(bpe):
    """Python holds bytes that are not UTF-8 (a prompt such as $'\\xff') as lone surrogates; Hugging Face tokenizers
    rejects them with a bare TypeError (a traceback from `gpt-train sample`), so BPE refuses them as the others do."""
    text = b"the \xff".decode("utf-8", errors="surrogateescape")
    for tokenizer in every_tokenizer(bpe):
        for encode in (tokenizer.encode, lambda t, tok=tokenizer: tok.encode_batch(["fine", t])):
            with pytest.raises(ValueError, match="can't encode character '\\\\udcff'"):
                encode(text)


def test_too_small_a_bpe_vocabulary_is_refused():
    with pytest.raises(ValueError, match="vocab_size must be at least 257"):
        train_bpe(["abc"], vocab_size=256)


def test_a_file_that_is_not_a_tokenizer_is_refused():
    with pytest.raises(ValueError, match="not a Hugging Face tokenizers file"):
        BpeTokenizer(b"{not json")


def test_a_tokenizer_that_is_not_byte_level_bpe_is_refused():
    word_level = tokenizers.Tokenizer(tokenizers.models.WordLevel({"hello": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    with pytest.raises(ValueError, match="not a byte-level BPE tokenizer"):
        BpeTokenizer(word_level.to_str().encode())


def test_a_byte_level_tokenizer_without_its_decoder_still_decodes_through_its_bytes(bpe):
    data = json.loads(bpe.serialize())
    data["decoder"] = None
    again = BpeTokenizer(json.dumps(data).encode())
    assert again.decode(again.encode(TEXTS[2]).tolist()) == TEXTS[2]


def test_bpe_without_the_extra_installed_is_a_one_line_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers now raises ImportError
    for make in (lambda: train_bpe(["abc"], vocab_size=300), lambda: BpeTokenizer(b"{}")):
        with pytest.raises(ValueError) as error:
            make()
        assert str(error.value) == BPE_EXTRA and "pip install 'gpt-tasks[bpe]'" in BPE_EXTRA
