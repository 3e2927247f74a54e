"""Train / held-out splits by the blake2b hash of each example's canonical bytes, the same on every machine (Python's
built-in hash is salted per process); the README's "Hash splits"."""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Callable, Iterable

import numpy as np
import torch

MAX_ENUMERATED = 2_000_000  # example spaces up to this size have their split computed once, in full
SAMPLED_EVALUATION = 20_000  # examples scored when a split is too large to list and no limit is given
CACHED_FROM = 100_000  # enumerated spaces from this size keep their split in the user's cache
MIN_SAMPLED_SHARE = 0.001  # of a sampled split's smaller side: below it, drawing by hash would all but never end


def unit_hashes(encodings: Iterable[bytes], salt: bytes) -> np.ndarray:
    """A number in [0, 1) fixed by each encoding and `salt` (N,): the 8-byte blake2b digest as a fraction."""
    salt = salt[:16].ljust(16, b"\0")
    digests = b"".join(hashlib.blake2b(data, digest_size=8, salt=salt).digest() for data in encodings)
    return np.frombuffer(digests, dtype=">u8").astype(np.float64) / 2**64  # correctly rounded, as int / 2**64


def unit_hash(data: bytes, salt: bytes) -> float:
    return float(unit_hashes([data], salt)[0])


def is_heldout(data: bytes, fraction: float, salt: bytes) -> bool:
    return unit_hash(data, salt) < fraction


def check_samplable(fraction: float, size: str = "too large to list") -> None:
    """A ValueError unless drawing by hash keeps at least MIN_SAMPLED_SHARE of the candidates on either side."""
    if min(fraction, 1.0 - fraction) < MIN_SAMPLED_SHARE:
        raise ValueError(
            f"the examples ({size}) are drawn and kept by their hash, so holding out {fraction:g} would take "
            f"about {1 / min(fraction, 1.0 - fraction):,.0f} draws per example kept; hold out between "
            f"{MIN_SAMPLED_SHARE:g} and {1 - MIN_SAMPLED_SHARE:g}"
        )


def heldout_mask(encodings: Iterable[bytes], fraction: float, salt: bytes) -> torch.Tensor:
    return torch.from_numpy(unit_hashes(encodings, salt) < fraction)


def enumerated_mask(
    size: int, encode: Callable[[torch.Tensor], list[bytes]], fraction: float, salt: bytes
) -> torch.Tensor:
    """`heldout_mask` of every id 0 .. size-1, kept in the user's cache one bit each; the key holds the encodings of
    a spread of ids, so a changed encoding is a new key. A cache that fails only means the hashes are computed."""
    if size < CACHED_FROM:
        return heldout_mask(encode(torch.arange(size, device="cpu")), fraction, salt)
    from gpt_tasks.text.cache import key_of, user_cache, write_atomically  # it imports us

    spread = torch.linspace(0, size - 1, 257, device="cpu").long()
    probe = hashlib.sha256(b"".join(encode(spread))).hexdigest()
    key = key_of({"split": "indexed", "size": size, "fraction": fraction, "salt": salt.hex(), "probe": probe})
    path = user_cache() / "splits" / f"{key}.npy"
    with contextlib.suppress(OSError, ValueError, EOFError):  # damaged or unreadable: computed again below
        bits = np.load(path)
        if bits.dtype == np.uint8 and bits.shape == ((size + 7) // 8,):
            return torch.from_numpy(np.unpackbits(bits, count=size).astype(bool))
    mask = heldout_mask(encode(torch.arange(size, device="cpu")), fraction, salt)
    packed = io.BytesIO()
    np.save(packed, np.packbits(mask.numpy()))
    with contextlib.suppress(OSError):  # an unwritable cache: the next process hashes again
        write_atomically(path, packed.getvalue())
    return mask


class IndexedSplit:
    """The split of the examples 0 .. size-1, each encoded by `encode`: listed up to MAX_ENUMERATED, else sampled.
    A listed split with no example on one of `needed` sides is refused."""

    def __init__(
        self,
        size: int,
        encode: Callable[[torch.Tensor], list[bytes]],
        fraction: float,
        salt: bytes,
        needed: tuple[str, ...] = ("train", "heldout"),
    ):
        self.size, self.encode, self.fraction, self.salt = size, encode, fraction, salt
        self.enumerated = size <= MAX_ENUMERATED
        if self.enumerated:
            every = torch.arange(size, device="cpu")
            mask = enumerated_mask(size, encode, fraction, salt)
            self._ids = {"heldout": every[mask], "train": every[~mask]}
            for side in needed:
                if not len(self._ids[side]):
                    kept = "none to train on" if side == "train" else "none held out"
                    raise ValueError(f"holding out {fraction:g} of the {size:,} examples leaves {kept}")
        else:
            check_samplable(fraction, f"{size:,}, too many to list")

    def count(self, split: str) -> int | None:
        """Examples in `split`; None when the space is too large to list."""
        return len(self._ids[split]) if self.enumerated else None

    def ids(self, split: str) -> torch.Tensor:
        if not self.enumerated:
            raise ValueError(f"the example space ({self.size:,}) is too large to list; sample it instead")
        return self._ids[split]

    def sample(self, split: str, n: int, generator: torch.Generator) -> torch.Tensor:
        """n ids drawn uniformly, with replacement; an unlisted space keeps the candidates its hash puts there."""
        if self.enumerated:
            pool = self._ids[split]
            return pool[torch.randint(len(pool), (n,), generator=generator, device="cpu")]
        kept: list[torch.Tensor] = []
        while sum(map(len, kept)) < n:
            candidates = torch.randint(self.size, (2 * n,), generator=generator, device="cpu")
            mask = heldout_mask(self.encode(candidates), self.fraction, self.salt)
            kept.append(candidates[mask if split == "heldout" else ~mask])
        return torch.cat(kept)[:n]

    def evaluation_ids(self, split: str, limit: int | None, seed: int = 0) -> torch.Tensor:
        """All of `split` when listed and `limit` is None, else a sample of `limit` (or SAMPLED_EVALUATION), the same
        on every call so that logged metrics compare."""
        generator = torch.Generator().manual_seed(seed)
        if self.enumerated:
            pool = self._ids[split]
            if limit is None or limit >= len(pool):
                return pool
            return pool[torch.randperm(len(pool), generator=generator, device="cpu")[:limit]]
        return self.sample(split, SAMPLED_EVALUATION if limit is None else limit, generator)
