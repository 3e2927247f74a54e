"""Tokenizers of text tasks: characters (with an unknown token), bytes, and byte-level BPE. Each says which bytes
every token stands for, which turns nats per token into bits per character and per byte whatever the tokenizer;
`serialize()` gives the bytes that define it, which key the token cache and which a run keeps."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from gpt_tasks.symbols import checked_ids

KINDS = ("char", "byte", "bpe")
REPLACEMENT = "\ufffd"  # what the unknown-character token decodes to and counts as

BPE_EXTRA = "tokenizer=bpe needs the Hugging Face tokenizers package: pip install 'gpt-tasks[bpe]'"
MIN_BPE_VOCAB = 257  # the 256 bytes and at least one merge
_PROBE = "Hello, wörld!\n\tTabs  and  spaces, 日本語, emoji 🎉, e\u0301.\r\n"


class Tokenizer(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64) of `text`; a character it cannot represent becomes its unknown token."""

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self.encode(text) for text in texts]

    @abstractmethod
    def token_bytes(self) -> list[bytes]:
        """The UTF-8 bytes of each id (a byte-level token may hold part of a character)."""

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes())

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; bytes that do not form whole characters become U+FFFD."""
        table = self.token_bytes()
        return b"".join(table[i] for i in checked_ids(ids, len(table))).decode("utf-8", errors="replace")

    def unknown_characters(self, text: str) -> str:
        """The distinct characters of `text` that `encode` maps to an unknown token, sorted."""
        return ""

    @abstractmethod
    def serialize(self) -> bytes:
        """The bytes that define this tokenizer; `load_tokenizer(kind, data)` rebuilds it."""

    def identity(self) -> str:
        return hashlib.sha256(self.kind.encode() + b"\0" + self.serialize()).hexdigest()


def token_sizes(tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(characters, bytes) of each id: its characters are the bytes that start one, so a token sequence's counts
    add up to its text's even where a byte-level token splits a character."""
    table = tokenizer.token_bytes()
    n_bytes = np.array([len(b) for b in table], dtype=np.int64)
    n_chars = np.array([sum((x & 0xC0) != 0x80 for x in b) for b in table], dtype=np.int64)
    return n_chars, n_bytes


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


def learn_alphabet(texts: Iterable[str]) -> str:
    seen = np.zeros(0, dtype="<u4")
    for text in texts:
        seen = np.union1d(seen, np.unique(_codepoints(text)))
    return "".join(map(chr, seen.tolist()))


class CharTokenizer(Tokenizer):
    """One id per character of `alphabet`, then the unknown-character token (held-out text may need it)."""

    kind = "char"

    def __init__(self, alphabet: str):
        if not alphabet:
            raise ValueError("a character tokenizer needs at least one character")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("vocabulary characters must be distinct")
        self.alphabet = alphabet
        points = _codepoints(alphabet)
        self._order = np.argsort(points, kind="stable")
        self._sorted = points[self._order]
        self.unknown_id = len(alphabet)

    def encode(self, text: str) -> np.ndarray:
        points = _codepoints(text)
        where = np.searchsorted(self._sorted, points).clip(max=len(self._sorted) - 1)
        known = self._sorted[where] == points
        return np.where(known, self._order[where], self.unknown_id).astype(np.int64)

    def token_bytes(self) -> list[bytes]:
        return [ch.encode() for ch in self.alphabet] + [REPLACEMENT.encode()]

    def unknown_characters(self, text: str) -> str:
        return "".join(sorted(set(text) - set(self.alphabet)))

    def serialize(self) -> bytes:
        return self.alphabet.encode()


class ByteTokenizer(Tokenizer):
    kind = "byte"

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)

    def token_bytes(self) -> list[bytes]:
        return [bytes([i]) for i in range(256)]

    def serialize(self) -> bytes:
        return b""


def _hf() -> Any:
    """The Hugging Face tokenizers module, or the one-line error naming the extra that installs it."""
    try:
        import tokenizers
    except ImportError:
        raise ValueError(BPE_EXTRA) from None
    return tokenizers


def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet (Hugging Face's ByteLevel): each byte's printable character, mapped to it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    chars = printable + [256 + i for i in range(len(others))]
    return {chr(c): b for c, b in zip(chars, printable + others, strict=True)}


def _utf8_text(text: str) -> str:
    """`text`, refused in one line where it holds a lone surrogate (Python's stand-in for bytes that are not UTF-8),
    which Hugging Face tokenizers would reject with a bare TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"the text is not valid UTF-8 ({error})") from None
    return text


class BpeTokenizer(Tokenizer):
    """A Hugging Face byte-level BPE tokenizer, defined by its JSON (the extra `gpt-tasks[bpe]`)."""

    kind = "bpe"

    def __init__(self, data: bytes):
        hf = _hf()
        try:
            self.hf = hf.Tokenizer.from_str(data.decode())
        except Exception as error:  # tokenizers raises plain Exceptions for malformed JSON
            raise ValueError(f"not a Hugging Face tokenizers file ({str(error).splitlines()[0]})") from None
        for setting in ("padding", "truncation"):  # each would pad or cut every chunk encoded in a batch
            if getattr(self.hf, setting) is not None:
                raise ValueError(f"the tokenizer has {setting} turned on, which would change the text it encodes")
        self.data = data
        self._bytes = self._token_bytes()
        if self.decode(self.encode(_PROBE).tolist()) != _PROBE:
            raise ValueError("not a byte-level BPE tokenizer: it does not give back the text it encodes")

    def _token_bytes(self) -> list[bytes]:
        alphabet = byte_alphabet()
        vocab = self.hf.get_vocab(with_added_tokens=True)
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError("not a usable tokenizer: its token ids are not 0 .. vocab_size - 1")
        added = {t.content for t in self.hf.get_added_tokens_decoder().values()}
        table = [b""] * len(vocab)
        for token, i in vocab.items():
            if token in added:
                table[i] = token.encode()
            elif all(ch in alphabet for ch in token):
                table[i] = bytes(alphabet[ch] for ch in token)
            else:
                raise ValueError(f"not a byte-level BPE tokenizer: token {token!r} is not made of byte symbols")
        return table

    def encode(self, text: str) -> np.ndarray:
        return np.array(self.hf.encode(_utf8_text(text)).ids, dtype=np.int64)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.array(e.ids, dtype=np.int64) for e in self.hf.encode_batch([_utf8_text(t) for t in texts])]

    def token_bytes(self) -> list[bytes]:
        return self._bytes

    def serialize(self) -> bytes:
        return self.data


def train_bpe(texts: Iterable[str], vocab_size: int) -> BpeTokenizer:
    """A byte-level BPE of at most `vocab_size` tokens learned from `texts`: the 256 bytes, then merges."""
    if vocab_size < MIN_BPE_VOCAB:
        raise ValueError(f"vocab_size must be at least {MIN_BPE_VOCAB} (the 256 bytes and a merge), got {vocab_size}")
    hf = _hf()
    level = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer = hf.Tokenizer(hf.models.BPE())
    tokenizer.pre_tokenizer = level
    tokenizer.decoder = hf.decoders.ByteLevel()
    trainer = hf.trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=level.alphabet(), special_tokens=[], show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return BpeTokenizer(tokenizer.to_str().encode())


def load_tokenizer(kind: str, data: bytes) -> Tokenizer:
    if kind == "char":
        return CharTokenizer(data.decode())
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        return BpeTokenizer(data)
    raise ValueError(f"tokenizer must be one of {', '.join(KINDS)}, got {kind!r}")
