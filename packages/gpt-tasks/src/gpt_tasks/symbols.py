"""The task author's toolkit, built-in and plugin tasks alike, so that a vocabulary error reads the same in every
task and a run of symbols hashes to the same split bytes everywhere (the README's "The task author's toolkit")."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"  # the symbols of bases up to 36 (base b uses the first b)


class CharVocab:
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
        return "".join(self.token_labels(ids))

    def token_labels(self, ids: Sequence[int]) -> list[str]:
        return [self.alphabet[i] for i in checked_ids(ids, len(self.alphabet))]


def checked_ids(ids: Sequence[int], vocab_size: int) -> list[int]:
    """`ids` as ints, or ValueError naming the first outside range(vocab_size) (a negative one indexed from the end)."""
    ids = [int(i) for i in ids]
    outside = next((i for i in ids if not 0 <= i < vocab_size), None)
    if outside is not None:
        raise ValueError(f"token id {outside} is outside the vocabulary (ids 0 to {vocab_size - 1})")
    return ids


def digits_of(ids: torch.Tensor, length: int, base: int) -> torch.Tensor:
    """Example numbers (N,) -> their base-`base` digits, most significant first (N, length)."""
    powers = base ** torch.arange(length - 1, -1, -1, device=ids.device)
    return (ids[:, None] // powers) % base


def one_digit_changes(ids: torch.Tensor, length: int, base: int) -> torch.Tensor:
    """Every example number that differs from each of `ids` (N,) in exactly one of its `length` base-`base`
    digits: (N, length * (base - 1)), digit by digit from the most significant."""
    digits = digits_of(ids, length, base)  # (N, length)
    powers = base ** torch.arange(length - 1, -1, -1, device=ids.device)  # (length,)
    values = torch.arange(base, device=ids.device)  # (base,)
    shifted = ids[:, None, None] + (values[None, None, :] - digits[:, :, None]) * powers[None, :, None]  # (N, L, base)
    keep = values[None, None, :] != digits[:, :, None]
    return shifted[keep].view(len(ids), -1)


def as_bytes(rows: torch.Tensor) -> list[bytes]:
    """One byte per symbol (below 256) of each row (N, L), whatever the dtype: the bytes split hashes are taken of."""
    return [row.tobytes() for row in rows.numpy().astype(np.uint8)]
