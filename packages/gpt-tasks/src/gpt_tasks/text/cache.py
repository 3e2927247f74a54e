"""The token cache: a corpus tokenized once into a file that training reads through a numpy memmap.

An entry is a directory named by its key (the corpus sha256, the chunk size, the split salt and the tokenizer),
under `$XDG_CACHE_HOME/gpt-tasks/text` or a task's `cache_dir`: `tokens.bin` (every chunk's ids), `chunks.npz`
(per chunk its token offset, size in characters and bytes, and split hash) and `meta.json`, written last. An
entry is built in a temporary directory and renamed into place, so a reader never sees half of one, and is
checked whole whenever it is opened, so a damaged or tampered entry is rebuilt rather than trained on. A
learned tokenizer is cached too, under `tokenizers/`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import shutil
import socket
import sys
import tempfile
import zipfile
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
    return Path(cache_dir).expanduser() if cache_dir else user_cache() / "text"


def key_of(fields: dict[str, Any]) -> str:
    """A short stable name for `fields` (JSON values): the first 32 hex digits of their sha256."""
    text = json.dumps({"format": FORMAT, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def say(message: str) -> None:
    """A line on stderr that does not break a progress bar."""
    tqdm.write(f"gpt-tasks: {message}", file=sys.stderr)


class DamagedEntry(ValueError):
    """An entry that is incomplete, damaged, or not the one its key names: it is rebuilt, never read."""


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
    def read(cls, root: Path, made_from: dict[str, Any], in_memory: bool = False) -> TokenCache:
        """The entry at `root`, checked whole, else DamagedEntry saying what is wrong with it. `made_from` holds
        what the key stands for (`corpus_sha256`, `tokenizer_sha256`, `vocab_size`), which meta.json must name."""
        try:
            meta = json.loads((root / META).read_text(encoding="utf-8"))
            dtype = np.dtype(meta["dtype"])
            n_tokens, n_chunks = int(meta["tokens"]), int(meta["chunks"])
            with np.load(root / CHUNKS) as tables:
                columns = tuple(tables[name] for name in COLUMNS)
            if meta["format"] != FORMAT or dtype not in ID_DTYPES:
                raise DamagedEntry(f"format {meta['format']!r}, ids {dtype}")
            _check_tables(columns, n_tokens, n_chunks)
            for field, value in made_from.items():
                if meta.get(field) != value:
                    raise DamagedEntry(f"made from {field} {meta.get(field)!r}, its key names {value!r}")
            if (root / TOKENS).stat().st_size != n_tokens * dtype.itemsize:
                raise DamagedEntry(f"{TOKENS} does not hold {n_tokens:,} ids")
            checksum, largest = _scan(root / TOKENS, dtype, columns)
            if checksum != meta["sha256"]:
                raise DamagedEntry("its contents do not match their checksum")
            if largest >= made_from["vocab_size"]:
                raise DamagedEntry(f"id {largest} is past the vocabulary of {made_from['vocab_size']:,}")
            tokens = (np.fromfile if in_memory else _map)(root / TOKENS, dtype)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
            if isinstance(error, DamagedEntry):
                raise
            raise DamagedEntry(f"unreadable: {error}") from None
        return cls(root, tokens, *columns)


COLUMNS = ("offsets", "chars", "bytes", "hashes")
COLUMN_DTYPES = (np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.float64))
ID_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32))
SCAN_BYTES = 1 << 24  # tokens.bin is checked this much at a time


def _check_tables(columns: tuple[np.ndarray, ...], n_tokens: int, n_chunks: int) -> None:
    """The chunk tables' shapes and bounds: offsets from 0 to the last token in order, sizes and split hashes
    that a chunk of text can have. A checksum does not replace this: an entry can be rewritten whole."""
    offsets, chars, sizes, hashes = columns
    for name, column, dtype in zip(COLUMNS, columns, COLUMN_DTYPES, strict=True):
        if column.dtype != dtype or column.ndim != 1 or len(column) != n_chunks + (name == "offsets"):
            raise DamagedEntry(f"its {name} table is not {n_chunks:,} {dtype} values")
    if offsets[0] != 0 or offsets[-1] != n_tokens or (np.diff(offsets) < 0).any():
        raise DamagedEntry("its chunk offsets are not in order from 0 to the last token")
    if (chars < 0).any() or (sizes < chars).any() or (sizes > 4 * chars).any():
        raise DamagedEntry("its chunk sizes are not those of UTF-8 text")
    if not ((hashes >= 0) & (hashes < 1)).all():
        raise DamagedEntry("its split hashes are not in [0, 1)")


def _scan(path: Path, dtype: np.dtype, columns: Iterable[np.ndarray]) -> tuple[str, int]:
    """The entry's checksum (sha256 of the ids, then of each chunk table) and its largest id."""
    digest, largest = hashlib.sha256(), -1
    with open(path, "rb") as handle:
        while block := handle.read(SCAN_BYTES):
            digest.update(block)
            largest = max(largest, int(np.frombuffer(block, dtype=dtype).max()))
    for column in columns:
        digest.update(column.tobytes())
    return digest.hexdigest(), largest


def _map(path: Path, dtype: np.dtype) -> np.ndarray:
    """A read-only memmap of the file: its pages are read when touched and belong to the kernel's page cache
    (shared, and dropped under memory pressure), never to the process's own memory. Training reads windows at
    random offsets, so the kernel is told not to read ahead of each from disk."""
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=dtype)  # mmap cannot map an empty file
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
    corpus: tuple[str, int],
    in_memory: bool,
) -> TokenCache:
    """The entry at `root`, built first from `chunks()` if it is not there whole. `corpus` is the sha256 and size
    of the text the chunks are cut from: text that hashes otherwise as it is tokenized is a ValueError."""
    sha256, total_bytes = corpus
    made_from = {"corpus_sha256": sha256, "tokenizer_sha256": tokenizer.identity(), "vocab_size": tokenizer.vocab_size}
    remove_stale_temporaries(root.parent)
    try:
        return TokenCache.read(root, made_from, in_memory)
    except DamagedEntry as damage:
        if (root / META).exists():
            say(f"the token cache {root} is damaged ({damage}); rebuilding it")
    say(f"preparing the token cache {root} (tokenizer {tokenizer.kind}, {tokenizer.vocab_size:,} ids)")
    root.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=temporary_name(root.name) + ".", dir=root.parent))
    try:
        n_tokens = _build(building, chunks(), tokenizer, salt, made_from, total_bytes)
        if root.exists():
            try:
                TokenCache.read(root, made_from)  # another process finished the same entry meanwhile
            except DamagedEntry:
                shutil.rmtree(root)
        with contextlib.suppress(OSError):  # failing, another process finished the same entry first: use theirs
            os.rename(building, root)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    try:
        cache = TokenCache.read(root, made_from, in_memory)
    except DamagedEntry as damage:
        raise ValueError(f"the token cache {root} could not be written ({damage})") from None
    say(f"token cache ready: {root} ({n_tokens:,} tokens)")
    return cache


def _build(
    folder: Path, chunks: Iterable[str], tokenizer: Tokenizer, salt: bytes, made_from: dict[str, Any], total_bytes: int
) -> int:
    """Tokenize every chunk into `folder`; returns the number of tokens. The text is hashed as it is
    tokenized: a ValueError when it is not the text of `made_from['corpus_sha256']`."""
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32)
    offsets, chars, sizes, hashes = array("q", [0]), array("q"), array("q"), array("d")  # 8 bytes a chunk each
    text_digest = hashlib.sha256()
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc=f"tokenizing ({tokenizer.kind})", disable=None)
    with bar, open(folder / TOKENS, "wb") as out:
        for batch in _batches(chunks):
            for text, ids in zip(batch, tokenizer.encode_batch(batch), strict=True):
                data = text.encode()
                out.write(ids.astype(dtype).tobytes())
                text_digest.update(data)
                offsets.append(offsets[-1] + len(ids))
                chars.append(len(text))
                sizes.append(len(data))
                hashes.append(unit_hash(data, salt))
                bar.update(len(data))
    if text_digest.hexdigest() != made_from["corpus_sha256"]:
        raise ValueError(changed_while_read("tokenized"))
    columns = tuple(map(np.asarray, (offsets, chars, sizes, hashes)))
    np.savez(folder / CHUNKS, **dict(zip(COLUMNS, columns, strict=True)))
    meta = {"format": FORMAT, "dtype": dtype.name, "tokens": offsets[-1], "chunks": len(chars)}
    meta |= {"tokenizer": tokenizer.kind, **made_from, "sha256": _scan(folder / TOKENS, dtype, columns)[0]}
    (folder / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return offsets[-1]


def changed_while_read(doing: str) -> str:
    return (
        f"the corpus changed while it was {doing} (its text no longer has the sha256 read first); "
        "nothing was cached: run again once nothing is writing to it"
    )


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
    with contextlib.suppress(OSError, ValueError):  # absent or damaged: learned again
        return load_tokenizer(kind, path.read_bytes())
    tokenizer = learn()
    write_atomically(path, tokenizer.serialize())
    return tokenizer


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to a temporary beside `path`, then rename it into place: no reader sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    partial = path.with_name(temporary_name(path.name))
    partial.write_bytes(data)
    os.replace(partial, path)


def temporary_name(name: str) -> str:
    """The hidden name `name` is built under by this process: its host and process id say when it is stale."""
    return f".{name}{_marker()}{os.getpid()}"


def _marker() -> str:
    return f".tmp-{socket.gethostname()}-"


def remove_stale_temporaries(folder: Path) -> None:
    """Remove what processes of this host that are no longer running were building in `folder` (killed
    mid-preparation); a live process's temporaries, and other hosts' (a shared cache), are left alone."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(".")]
    except OSError:
        return
    for name in names:
        _, marker, tail = name.rpartition(_marker())
        pid = tail.split(".")[0]  # a directory's name goes on with mkdtemp's ".XXXXXXXX"
        if not marker or not pid.isdigit() or _is_running(int(pid)):
            continue
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def _is_running(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # os.kill(pid, 0) is not a probe on Windows: keep everything
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        pass
    return True
