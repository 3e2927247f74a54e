"""Character vocabularies: one character per token id."""

from __future__ import annotations

from collections.abc import Sequence

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


class CharVocab:
    """Maps each character of `alphabet` to its index."""

    def __init__(self, alphabet: str):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("vocabulary characters must be distinct")
        self.alphabet = alphabet
        self.index = {ch: i for i, ch in enumerate(alphabet)}

    def __len__(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r} (vocabulary: {self.alphabet!r})")
        return [self.index[ch] for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.alphabet[i] for i in ids)
