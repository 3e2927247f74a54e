"""The token cache: a corpus tokenized once into a file that training reads through a numpy memmap.

One entry is a directory, named by its key, under the cache root (`$XDG_CACHE_HOME/gpt-tasks/text`,
default `~/.cache/gpt-tasks/text`, or a task's `cache_dir`):

    tokens.bin   the token ids of every chunk, one chunk after another: uint16 for vocabularies of up to
                 65,536 ids, else uint32
    chunks.npz   per chunk: `offsets` (where its tokens start, plus the total at the end), `chars` and
                 `bytes` (its size as text) and `hashes` (its split hash, `unit_hash` of its UTF-8 bytes)
    meta.json    what the entry holds; written last, so an entry without it is incomplete and is rebuilt

The key hashes the corpus sha256, the chunk size, the split salt and the tokenizer's identity: change
any of them and it is another entry, while an unchanged corpus and tokenizer are never tokenized twice.
The split fraction is not in the key (each chunk's hash is stored, and the task compares it with the
fraction). A learned tokenizer (a character alphabet, a BPE) is cached too, under `tokenizers/`, keyed
by what it was learned from: the corpus, the chunking, the split and the tokenizer settings.

An entry is built in a temporary directory and renamed into place: a reader never sees half of one,
and two processes preparing the same entry at once both end up reading one complete copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import sys
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gpt_tasks.splits import unit_hash
from gpt_tasks.text.tokenizer import Tokenizer, load_tokenizer

FORMAT = 1
BATCH_CHARS = 1 << 20  # characters tokenized per batch of chunks
TOKENS, CHUNKS, META = "tokens.bin", "chunks.npz", "meta.json"


def user_cache() -> Path:
    """gpt-tasks' folder in the user's cache: $XDG_CACHE_HOME (an absolute path; else ~/.cache)/gpt-tasks."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "gpt-tasks"


def cache_root(cache_dir: str = "") -> Path:
    """Where token caches live: `cache_dir` when given, else user_cache()/text."""
    return Path(cache_dir).expanduser() if cache_dir else user_cache() / "text"


def key_of(fields: dict[str, Any]) -> str:
    """A short stable name for `fields` (JSON values): the first 32 hex digits of their sha256."""
    text = json.dumps({"format": FORMAT, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def say(message: str) -> None:
    """A line on stderr that does not break a progress bar."""
    tqdm.write(f"gpt-tasks: {message}", file=sys.stderr)


@dataclass(frozen=True)
class TokenCache:
    """An entry, opened: `tokens` is a read-only memmap of tokens.bin (or an in-memory copy), the rest per chunk."""

    root: Path
    tokens: np.ndarray
    offsets: np.ndarray
    chars: np.ndarray
    utf8_bytes: np.ndarray
    hashes: np.ndarray

    @classmethod
    def open(cls, root: Path, in_memory: bool = False) -> TokenCache | None:
        """The entry at `root`, or None when it is absent, incomplete or damaged."""
        try:
            meta = json.loads((root / META).read_text(encoding="utf-8"))
            dtype = np.dtype(meta["dtype"])
            n_tokens, n_chunks = int(meta["tokens"]), int(meta["chunks"])
            if meta["format"] != FORMAT or (root / TOKENS).stat().st_size != n_tokens * dtype.itemsize:
                return None
            with np.load(root / CHUNKS) as tables:
                offsets, chars, sizes, hashes = (tables[name] for name in ("offsets", "chars", "bytes", "hashes"))
            if len(offsets) != n_chunks + 1 or offsets[-1] != n_tokens or not len(chars) == len(hashes) == n_chunks:
                return None
            tokens = (np.fromfile if in_memory else _map)(root / TOKENS, dtype)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return cls(root, tokens, offsets, chars, sizes, hashes)


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    """A read-only memmap of the file: its pages are read when touched and belong to the kernel's page cache
    (shared, and dropped under memory pressure), never to the process's own memory. Training reads windows at
    random offsets, so the kernel is told not to read ahead of each from disk."""
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_RANDOM"):  # not on Windows
        mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=dtype)


def prepare(
    root: Path,
    chunks: Callable[[], Iterable[str]],
    tokenizer: Tokenizer,
    salt: bytes,
    total_bytes: int,
    in_memory: bool,
) -> TokenCache:
    """The entry at `root`, built first (from the chunks that `chunks()` yields) if it is not there whole."""
    cache = TokenCache.open(root, in_memory)
    if cache is not None:
        return cache
    say(f"preparing the token cache {root} (tokenizer {tokenizer.kind}, {tokenizer.vocab_size:,} ids)")
    root.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        n_tokens = _build(building, chunks(), tokenizer, salt, total_bytes)
        if root.exists() and TokenCache.open(root) is None:
            shutil.rmtree(root)  # an incomplete entry left by a killed process
        with contextlib.suppress(OSError):  # failing, another process finished the same entry first: use theirs
            os.rename(building, root)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    cache = TokenCache.open(root, in_memory)
    if cache is None:
        raise ValueError(f"the token cache {root} could not be written")
    say(f"token cache ready: {root} ({n_tokens:,} tokens)")
    return cache


def _build(folder: Path, chunks: Iterable[str], tokenizer: Tokenizer, salt: bytes, total_bytes: int) -> int:
    """Tokenize every chunk into `folder`; returns the number of tokens."""
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32)
    offsets, chars, sizes, hashes = array("q", [0]), array("q"), array("q"), array("d")  # 8 bytes a chunk each
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"tokenizing ({tokenizer.kind})", disable=None)
    with bar, open(folder / TOKENS, "wb") as out:
        for batch in _batches(chunks):
            for text, ids in zip(batch, tokenizer.encode_batch(batch), strict=True):
                data = text.encode()
                out.write(ids.astype(dtype).tobytes())
                offsets.append(offsets[-1] + len(ids))
                chars.append(len(text))
                sizes.append(len(data))
                hashes.append(unit_hash(data, salt))
                bar.update(len(data))
    np.savez(folder / CHUNKS, offsets=offsets, chars=chars, bytes=sizes, hashes=hashes)
    meta = {"format": FORMAT, "dtype": dtype.name, "tokens": offsets[-1], "chunks": len(chars)}
    meta |= {"tokenizer": tokenizer.kind, "vocab_size": tokenizer.vocab_size, "tokenizer_sha256": tokenizer.identity()}
    (folder / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return offsets[-1]


def _batches(chunks: Iterable[str]) -> Iterator[list[str]]:
    """The chunks in lists of about BATCH_CHARS characters (tokenizers with a batch path use every core)."""
    batch, size = [], 0
    for chunk in chunks:
        batch.append(chunk)
        size += len(chunk)
        if size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def cached_tokenizer(path: Path, kind: str, learn: Callable[[], Tokenizer]) -> Tokenizer:
    """The tokenizer saved at `path`, or `learn()`'s, saved there first."""
    if path.is_file():
        try:
            return load_tokenizer(kind, path.read_bytes())
        except (OSError, ValueError):
            pass  # damaged: learn it again
    tokenizer = learn()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    partial.write_bytes(tokenizer.serialize())
    os.replace(partial, path)
    return tokenizer
