"""shakespeare: character-level language modelling on tiny-shakespeare (Karpathy's char-rnn input.txt).

The text is cut into chunks of `chunk_size` characters and each chunk goes to the held-out
split if the blake2b hash of its bytes says so (about `heldout_fraction` of them), so the split
does not depend on where the file came from or on the process. Training windows of
block_size + 1 characters lie wholly inside one training chunk; every position is scored on the
next character. Evaluation reports the mean loss (nats per character) and bits per character
over non-overlapping windows of the split's chunks.

The text comes from `data` (a path) when given, else from the user cache
(`$XDG_CACHE_HOME/gpt-tasks/tinyshakespeare.txt`, default `~/.cache/...`), else it is downloaded
once into that cache and checked against its known sha256.

A trained model only makes sense with the vocabulary it was trained on, and its metrics only with
the text they were measured on. So the task's params carry both once resolved: `alphabet` (the
vocabulary, token id = index) and `corpus_sha256`. A task built from params that already hold them
(as a saved run's are) decodes with the recorded alphabet and refuses a text whose hash differs,
rather than rebuilding a different vocabulary from an edited file and reporting a wrong number.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.request import urlopen

import torch

from gpt_core import GPT
from gpt_tasks.scoring import score_examples
from gpt_tasks.splits import is_heldout
from gpt_tasks.symbols import CharVocab
from gpt_tasks.task import SPLITS, Batch, Task
from gpt_tasks.training import Defaults, TrainSettings

CORPUS_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CACHE_NAME = "tinyshakespeare.txt"
DOWNLOAD_TIMEOUT = 15.0  # seconds
EVAL_BATCH = 256  # windows per forward pass
SALT = b"shakespeare"
PROMPTS = ("ROMEO:", "JULIET:", "KING RICHARD III:", "MENENIUS:")
_LABELS = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}

HOW_TO_SUPPLY = (
    "pass the file with `--data PATH` (or `--set data=PATH`, or get_task('shakespeare', data=PATH)); "
    f"the file is the canonical char-rnn input.txt from {CORPUS_URL}"
)


@dataclass(frozen=True)
class ShakespeareParams:
    """`alphabet` and `corpus_sha256` are resolved from the text when left empty (the task's
    `params` then hold them); when given, they pin the vocabulary and the text a run was trained on."""

    data: str = ""
    block_size: int = 64
    chunk_size: int = 1024
    heldout_fraction: float = 0.1
    alphabet: str = ""
    corpus_sha256: str = ""

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if self.chunk_size <= self.block_size:
            raise ValueError(
                f"chunk_size ({self.chunk_size}) must be larger than block_size ({self.block_size}): "
                "a window of block_size + 1 characters must fit inside one chunk"
            )
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet must not repeat a character, got {self.alphabet!r}")
        if self.corpus_sha256 and not re.fullmatch(r"[0-9a-f]{64}", self.corpus_sha256):
            raise ValueError(f"corpus_sha256 must be 64 lowercase hex digits, got {self.corpus_sha256!r}")


def cache_path() -> Path:
    """Where a downloaded corpus is kept: $XDG_CACHE_HOME (or ~/.cache)/gpt-tasks/tinyshakespeare.txt."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "gpt-tasks" / CACHE_NAME


def download(path: Path, url: str | None = None, sha256: str | None = None) -> Path:
    """Fetch the corpus (default CORPUS_URL) into `path`, verifying its sha256 (default
    CORPUS_SHA256); nothing is left behind on failure."""
    url, sha256 = url or CORPUS_URL, sha256 or CORPUS_SHA256
    try:
        with urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            data = response.read()
    except (OSError, ValueError) as error:  # URLError, timeouts and refused connections are OSErrors
        raise ValueError(
            f"tiny-shakespeare is not available offline and the download failed ({error}); {HOW_TO_SUPPLY}"
        ) from error
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        partial.unlink(missing_ok=True)
        raise ValueError(f"downloaded {url} has sha256 {digest}, expected {sha256}; the download was deleted")
    os.replace(partial, path)
    return path


def load_text(data: str) -> tuple[Path, str]:
    """The corpus and where it was read: from `data` when given, else the cache, else a verified
    download into the cache."""
    if data:
        path = Path(data).expanduser()
        if not path.is_file():
            raise ValueError(f"tiny-shakespeare file not found: {path}")
    else:
        path = cache_path()
        if not path.is_file():
            download(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read tiny-shakespeare file {path}: {error}") from None
    if not text:
        raise ValueError(f"tiny-shakespeare file {path} is empty")
    return path, text


def resolve(params: ShakespeareParams, path: Path, text: str) -> ShakespeareParams:
    """`params` with the text's alphabet and sha256 filled in where empty; a recorded sha256 that
    differs from the text's is a ValueError (the file changed after the run was trained)."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()  # the file's own sha256 for an LF text
    if params.corpus_sha256 and params.corpus_sha256 != digest:
        raise ValueError(
            f"the corpus at {path} has changed since this run was trained "
            f"(sha256 {digest}, recorded {params.corpus_sha256})"
        )
    alphabet = params.alphabet or "".join(sorted(set(text)))
    return dataclasses.replace(params, alphabet=alphabet, corpus_sha256=digest)


class ShakespeareTask(Task):
    name = "shakespeare"
    description = "character-level language model on tiny-shakespeare (loss in nats, bits per char)"
    Params = ShakespeareParams
    primary_metric = "loss"
    higher_is_better = False

    def __init__(self, params: ShakespeareParams):
        path, text = load_text(params.data)
        params = resolve(params, path, text)
        super().__init__(params)
        self.vocab = CharVocab(params.alphabet)
        self.tokens = torch.tensor(self.vocab.encode(text), dtype=torch.long)
        size, window = params.chunk_size, params.block_size + 1
        # Every chunk that can hold a window; only a short tail of the text can fall outside.
        starts = [s for s in range(0, len(text), size) if len(text) - s >= window]
        self.chunk_starts = torch.tensor(starts, dtype=torch.long)
        self.chunk_lengths = torch.tensor([min(size, len(text) - s) for s in starts], dtype=torch.long)
        heldout = [is_heldout(text[s : s + size].encode("utf-8"), params.heldout_fraction, SALT) for s in starts]
        self.heldout = torch.tensor(heldout, dtype=torch.bool)
        for split in SPLITS:
            if not self.chunks(split).numel():
                raise ValueError(
                    f"the text ({len(text):,} characters, {len(starts)} chunks of {size}) has no {split} chunk; "
                    "use a longer text or a smaller chunk_size"
                )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def block_size(self) -> int:
        return self.params.block_size

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    def token_labels(self, ids) -> list[str]:
        return [_LABELS.get(ch, ch) for ch in self.decode(ids)]

    def chunks(self, split: str) -> torch.Tensor:
        """Indices of the chunks in `split`."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        mask = self.heldout if split == "heldout" else ~self.heldout
        return mask.nonzero().squeeze(1)

    def windows(self, starts: torch.Tensor) -> Batch:
        """Windows starting at text offsets `starts` (N,): inputs and next-character targets (N, block_size)."""
        span = starts[:, None] + torch.arange(self.params.block_size + 1)
        seq = self.tokens[span]
        return Batch(seq[:, :-1], seq[:, 1:])

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.chunks("train")
        chunk = train[torch.randint(len(train), (batch_size,), generator=generator)]
        n_offsets = self.chunk_lengths[chunk] - self.params.block_size  # windows that fit in each chunk
        offsets = (torch.rand(batch_size, generator=generator) * n_offsets).long().clamp_(max=n_offsets - 1)
        return self.windows(self.chunk_starts[chunk] + offsets)

    def evaluation_starts(self, split: str, limit: int | None, seed: int = 0) -> torch.Tensor:
        """Offsets of the non-overlapping windows of `split`: all of them, or a fixed-seed sample of `limit`."""
        bs = self.params.block_size
        chunks = self.chunks(split)
        per_chunk = (self.chunk_lengths[chunks] - 1) // bs
        starts = torch.cat(
            [s + bs * torch.arange(n) for s, n in zip(self.chunk_starts[chunks], per_chunk, strict=True)]
        )
        if limit is None or limit >= len(starts):
            return starts
        generator = torch.Generator().manual_seed(seed)
        return starts[torch.randperm(len(starts), generator=generator)[:limit]].sort().values

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        model.config.check_positions(self.block_size, "each evaluation window")
        starts = self.evaluation_starts(split, limit)
        scores = score_examples(model, starts, self.windows, device, EVAL_BATCH)
        return {"loss": scores.loss, "bits_per_char": scores.loss / math.log(2), "examples": float(scores.examples)}

    def defaults(self) -> Defaults:
        return Defaults(
            model=self.model_config(n_layer=4, n_head=4, n_embd=128),
            train=TrainSettings(batch_size=12, eval_limit=200),
        )

    def example_prompts(self) -> list[str]:
        prompts = [p for p in PROMPTS if set(p) <= set(self.vocab.alphabet)]
        if prompts:
            return prompts
        start = int(self.chunk_starts[self.chunks("heldout")[0]])
        return [self.decode(self.tokens[start : start + 8].tolist())]

    def attention_example(self) -> str:
        start = int(self.chunk_starts[self.chunks("heldout")[0]])
        return self.decode(self.tokens[start : start + self.block_size].tolist())
