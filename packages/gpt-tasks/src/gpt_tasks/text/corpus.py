"""A text corpus on disk: one UTF-8 file, or a directory's non-hidden files matching a glob in sorted order, joined with
a newline after any that lacks one, each file's leading byte order mark dropped. It is streamed in blocks, so it may
be larger than memory; a file that is not UTF-8 or holds a NUL is refused by name."""

from __future__ import annotations

import codecs
import fnmatch
import hashlib
import os
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
        """The corpus at `path`; a missing path, a directory with no matching file and an empty corpus are refused."""
        if path.is_file():
            if path.stat().st_size == 0:
                raise ValueError(f"{noun} {path} is empty")
            return cls(path, (path,))
        if path.exists() and not path.is_dir():
            raise ValueError(f"{noun} {path} is not a regular file or a directory (a pipe or a device?)")
        if not path.is_dir():
            raise ValueError(f"{noun} not found: {path}")
        try:
            found = [p for p in path.glob(glob) if not _hidden(p.relative_to(path))]
        except (ValueError, NotImplementedError) as error:
            raise ValueError(f"glob {glob!r} cannot be used: {error}") from None
        matches = [p for p in found if p.is_file()]
        broken = next((p for p in found if p.is_symlink() and not p.exists()), None)
        if broken is not None:  # a link to text that matched, which reading would skip
            raise ValueError(f"{broken} matches glob {glob!r} but is a link to nothing ({os.readlink(broken)})")
        if (closed := _unlisted_directory(path, glob)) is not None:
            raise ValueError(f"cannot list {closed.filename} ({closed.strerror}): its files could match glob {glob!r}")
        if not matches:
            raise ValueError(f"no file under {path} matches glob {glob!r} (hidden files are skipped)")
        files = tuple(sorted(matches, key=lambda p: p.relative_to(path).as_posix()))
        if not any(p.stat().st_size for p in files):
            raise ValueError(f"the {len(files)} files under {path} matching {glob!r} are all empty")
        return cls(path, files)

    @property
    def size(self) -> int:
        """Bytes in the files; the joined text may add a newline between two."""
        return sum(p.stat().st_size for p in self.files)

    def pieces(self) -> Iterator[tuple[bytes, str]]:
        """The joined text in blocks, each block's bytes and its text (a character split between two blocks comes
        whole in the second)."""
        for number, path in enumerate(self.files):
            last = b""
            for raw, text in _read(path):
                last = raw[-1:] or last
                yield raw, text
            if number + 1 < len(self.files) and last not in (b"", b"\n"):
                yield b"\n", "\n"

    def texts(self) -> Iterator[str]:
        return (text for _, text in self.pieces())

    def read_chunks(
        self, size: int, digest: hashlib._Hash, desc: str, leave: bool = True
    ) -> Iterator[tuple[str, bytes]]:
        """The joined text `size` characters at a time (`chunks`), each with its UTF-8 bytes, which `digest` hashes."""
        with tqdm(total=self.size, unit="B", unit_scale=True, desc=desc, leave=leave, disable=None) as bar:
            for chunk in chunks(self.texts(), size):
                data = chunk.encode()
                digest.update(data)
                bar.update(len(data))
                yield chunk, data

    def sha256(self) -> str:
        """sha256 of the joined text's UTF-8 (a single file's own, less a byte order mark); reading it checks that it
        is text."""
        digest = hashlib.sha256()
        with tqdm(total=self.size, unit="B", unit_scale=True, desc="reading corpus", leave=False, disable=None) as bar:
            for raw, text in self.pieces():
                digest.update(text.encode())
                bar.update(len(raw))
        return digest.hexdigest()


def _unlisted_directory(root: Path, glob: str) -> OSError | None:
    """The error listing the first non-hidden directory under `root` that `glob` reaches and that cannot be listed,
    or None: Path.glob passes over such a directory without a word, and its files with it."""
    failed: list[OSError] = []
    for folder, subfolders, _ in os.walk(root, onerror=failed.append):
        if failed:
            break
        here = Path(folder).relative_to(root).parts
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and _reaches(glob, (*here, d))]
    return failed[0] if failed else None


def _reaches(glob: str, folder: tuple[str, ...]) -> bool:
    """Whether `glob` (its last part names files) may look inside `folder`, a path of names under the root."""
    parts = glob.split("/")
    for depth, name in enumerate(folder):
        if depth >= len(parts) - 1:
            return False
        if parts[depth] == "**":
            return True
        if not fnmatch.fnmatchcase(name, parts[depth]):
            return False
    return True


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _read(path: Path) -> Iterator[tuple[bytes, str]]:
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="strict")  # a leading BOM is no text
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
