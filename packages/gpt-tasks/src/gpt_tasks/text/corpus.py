"""A text corpus on disk: one UTF-8 file, or the files of a directory that match a glob, read as one text.

The text is streamed in blocks and never held whole, so a corpus may be larger than memory. The files of a
directory are read in the sorted order of their relative paths, hidden ones skipped, and joined with a newline
after any file that does not end with one. A file that is not UTF-8, or that holds a NUL character, is taken
for a binary file and refused by name: text tasks read text.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

BLOCK = 1 << 20  # bytes read at a time


@dataclass(frozen=True)
class Corpus:
    """The files of one corpus, in reading order; build it with `Corpus.find`."""

    path: Path
    files: tuple[Path, ...]

    @classmethod
    def find(cls, path: Path, glob: str, noun: str = "text corpus") -> Corpus:
        """The corpus at `path`: that file, or the non-hidden files under that directory matching `glob`.
        A missing path, a directory with no matching file and an empty corpus are ValueErrors."""
        if path.is_file():
            if path.stat().st_size == 0:
                raise ValueError(f"{noun} {path} is empty")
            return cls(path, (path,))
        if path.exists() and not path.is_dir():
            raise ValueError(f"{noun} {path} is not a regular file or a directory (a pipe or a device?)")
        if not path.is_dir():
            raise ValueError(f"{noun} not found: {path}")
        try:
            matches = [p for p in path.glob(glob) if p.is_file() and not _hidden(p.relative_to(path))]
        except (ValueError, NotImplementedError) as error:
            raise ValueError(f"glob {glob!r} cannot be used: {error}") from None
        if not matches:
            raise ValueError(f"no file under {path} matches glob {glob!r} (hidden files are skipped)")
        files = tuple(sorted(matches, key=lambda p: p.relative_to(path).as_posix()))
        if not any(p.stat().st_size for p in files):
            raise ValueError(f"the {len(files)} files under {path} matching {glob!r} are all empty")
        return cls(path, files)

    @property
    def size(self) -> int:
        """Bytes in the files (the joined text may add a newline between two of them)."""
        return sum(p.stat().st_size for p in self.files)

    def pieces(self) -> Iterator[tuple[bytes, str]]:
        """The joined text in blocks: each block's UTF-8 bytes and its text (a character split between two
        blocks comes whole in the second). A file that is not UTF-8 text is a ValueError naming it."""
        for number, path in enumerate(self.files):
            last = b""
            for raw, text in _read(path):
                last = raw[-1:] or last
                yield raw, text
            if number + 1 < len(self.files) and last not in (b"", b"\n"):
                yield b"\n", "\n"

    def texts(self) -> Iterator[str]:
        return (text for _, text in self.pieces())

    def sha256(self) -> str:
        """sha256 of the joined text as UTF-8 (a single file's own sha256); reading it checks that it is text."""
        digest = hashlib.sha256()
        with tqdm(total=self.size, unit="B", unit_scale=True, desc="reading corpus", leave=False, disable=None) as bar:
            for raw, _ in self.pieces():
                digest.update(raw)
                bar.update(len(raw))
        return digest.hexdigest()


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _read(path: Path) -> Iterator[tuple[bytes, str]]:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    read = 0  # bytes handed to the decoder so far
    try:
        with open(path, "rb") as handle:
            while raw := handle.read(BLOCK):
                read += len(raw)
                text = decoder.decode(raw)
                if "\0" in text:
                    raise ValueError(f"{path} holds a NUL byte: a binary file, not text")
                yield raw, text
            decoder.decode(b"", final=True)
    except UnicodeDecodeError as error:  # error.object: the bytes the decoder held, ending at `read`
        where = read - len(error.object) + error.start
        raise ValueError(f"{path} is not UTF-8 text (byte {where:,}: {error.reason}); a binary file?") from None
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None


def chunks(texts: Iterable[str], size: int) -> Iterator[str]:
    """`size` characters at a time of the text that `texts` yields in pieces; the last chunk may be shorter."""
    buffer = ""
    for text in texts:
        buffer += text
        whole = len(buffer) - len(buffer) % size
        yield from (buffer[start : start + size] for start in range(0, whole, size))
        buffer = buffer[whole:]
    if buffer:
        yield buffer
