"""The token cache: a corpus tokenized once into an entry (tokens.bin, chunks.npz, meta.json) that training reads
through a numpy memmap. An entry is built in a temporary directory renamed into place and checked whole when opened:
a damaged one is rebuilt, never trained on."""

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
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from gpt_tasks.splits import unit_hash
from gpt_tasks.text.corpus import Corpus
from gpt_tasks.text.tokenizer import Tokenizer

FORMAT = 1
BATCH_CHARS = 1 << 20  # characters tokenized per batch of chunks (a BPE's batch uses every core)
TOKENS, CHUNKS, META = "tokens.bin", "chunks.npz", "meta.json"
TEMPORARY = f".tmp-{socket.gethostname()}-"  # then a process id: what a temporary's name says of its maker


def user_cache() -> Path:
    """$XDG_CACHE_HOME (an absolute path; else ~/.cache)/gpt-tasks."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if base and os.path.isabs(base) else Path.home() / ".cache") / "gpt-tasks"


def cache_root(cache_dir: str = "") -> Path:
    return Path(cache_dir).expanduser() if cache_dir else user_cache() / "text"


def key_of(fields: dict[str, Any]) -> str:
    text = json.dumps({"format": FORMAT, **fields}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def say(message: str) -> None:
    """A line on stderr that does not break a progress bar."""
    tqdm.write(f"gpt-tasks: {message}", file=sys.stderr)


class DamagedEntry(ValueError):
    """An entry that is incomplete, damaged, or not the one its key names: rebuilt, never read."""


@dataclass(frozen=True)
class TokenCache:
    """An entry, opened: `tokens` a read-only memmap of tokens.bin (or a copy in memory), the rest per chunk."""

    root: Path
    tokens: np.ndarray
    offsets: np.ndarray
    chars: np.ndarray
    utf8_bytes: np.ndarray
    hashes: np.ndarray

    @classmethod
    def read(cls, root: Path, made_from: dict[str, Any], in_memory: bool = False) -> TokenCache:
        """The entry at `root`, checked whole, else DamagedEntry saying what is wrong; meta.json must name what the
        key stands for (`made_from`)."""
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
        except DamagedEntry:
            raise
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
            raise DamagedEntry(f"unreadable: {error}") from None
        return cls(root, tokens, *columns)


COLUMNS = ("offsets", "chars", "bytes", "hashes")
COLUMN_DTYPES = (np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.float64))
ID_DTYPES = (np.dtype(np.uint16), np.dtype(np.uint32))
SCAN_BYTES = 1 << 24  # tokens.bin is checked this much at a time


def _check_tables(columns: tuple[np.ndarray, ...], n_tokens: int, n_chunks: int) -> None:
    """The chunk tables' shapes and bounds (an entry rewritten whole has a matching checksum)."""
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
    """A read-only memmap: its pages belong to the kernel's page cache, never to the process, and are read at
    random offsets, so the kernel is told not to read ahead."""
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=dtype)  # mmap cannot map an empty file
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_RANDOM"):  # not on Windows
        mapped.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mapped, dtype=dtype)


def prepare(
    root: Path, corpus: Corpus, chunk_size: int, sha256: str, tokenizer: Tokenizer, salt: bytes, in_memory: bool
) -> TokenCache:
    """The entry at `root`, built first from the corpus's chunks if it is not there whole; a corpus that no
    longer has `sha256` as it is tokenized is a ValueError."""
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
        n_tokens = _build(building, corpus, chunk_size, tokenizer, salt, made_from)
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
    folder: Path, corpus: Corpus, chunk_size: int, tokenizer: Tokenizer, salt: bytes, made_from: dict[str, Any]
) -> int:
    """Tokenize every chunk into `folder`, hashing the text as it goes; returns the number of tokens."""
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32)
    offsets, chars, sizes, hashes = array("q", [0]), array("q"), array("q"), array("d")  # 8 bytes a chunk each
    text_digest = hashlib.sha256()
    pieces = corpus.read_chunks(chunk_size, text_digest, f"tokenizing ({tokenizer.kind})")
    with open(folder / TOKENS, "wb") as out:
        while batch := list(islice(pieces, max(1, BATCH_CHARS // chunk_size))):
            for (text, data), ids in zip(batch, tokenizer.encode_batch([text for text, _ in batch]), strict=True):
                out.write(ids.astype(dtype).tobytes())
                offsets.append(offsets[-1] + len(ids))
                chars.append(len(text))
                sizes.append(len(data))
                hashes.append(unit_hash(data, salt))
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


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to a temporary beside `path`, then rename it into place: no reader sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    partial = path.with_name(temporary_name(path.name))
    partial.write_bytes(data)
    os.replace(partial, path)


def temporary_name(name: str) -> str:
    return f".{name}{TEMPORARY}{os.getpid()}"


def remove_stale_temporaries(folder: Path) -> None:
    """Remove what processes of this host that are no longer running (killed mid-preparation) were building in
    `folder`; a live process's temporaries, and other hosts' (a shared cache), are left alone."""
    try:
        names = [name for name in os.listdir(folder) if name.startswith(".")]
    except OSError:
        return
    for name in names:
        _, marker, tail = name.rpartition(TEMPORARY)
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
