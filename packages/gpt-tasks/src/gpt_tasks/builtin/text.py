"""text: a language model on the user's own corpus, with character, byte or byte-level BPE tokens. A chunk of
`chunk_size` characters is held out by the hash of its UTF-8 bytes, and the tokenizer learned from the training
chunks alone; bits per character and per byte, unlike nats per token, rank runs whatever their tokenizer."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import torch

from gpt_core import GPT, IGNORE_INDEX
from gpt_tasks.params import check_fraction
from gpt_tasks.probes import PROBE_EXAMPLES, ProbeCache, induction_probes
from gpt_tasks.scoring import score_examples
from gpt_tasks.splits import is_heldout
from gpt_tasks.task import Batch, Defaults, Task
from gpt_tasks.text.cache import cache_root, changed_while_read, key_of, prepare, say, write_atomically
from gpt_tasks.text.corpus import Corpus
from gpt_tasks.text.tokenizer import (
    KINDS,
    MIN_BPE_VOCAB,
    BpeTokenizer,
    CharTokenizer,
    Tokenizer,
    learn_alphabet,
    load_tokenizer,
    token_sizes,
    train_bpe,
)

DEFAULT_BPE_VOCAB = 1024
EVAL_BATCH = 256  # windows per forward pass
FINAL_EVAL_WINDOWS = 4096  # a final evaluation's default sample (tiny-shakespeare has 1,744 held-out windows)
PROMPT_TOKENS = 8


@dataclass(frozen=True)
class TextParams:
    """`corpus_sha256`, `alphabet` (char) and `tokenizer_file` (bpe) are resolved from the corpus when left
    empty (the task's `params` then hold them); given, they pin the text and the tokenizer of a run."""

    data: str = ""
    glob: str = "**/*.txt"
    tokenizer: Literal["char", "byte", "bpe"] = "char"
    vocab_size: int | None = None
    block_size: int = 64
    chunk_size: int = 1024
    heldout_fraction: float = 0.1
    in_memory: bool = False
    cache_dir: str = ""
    alphabet: str = ""
    tokenizer_file: str = ""
    corpus_sha256: str = ""

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if self.chunk_size <= self.block_size:
            raise ValueError(
                f"chunk_size ({self.chunk_size}) must be larger than block_size ({self.block_size}): "
                "a window of block_size + 1 tokens must fit inside one chunk"
            )
        check_fraction("heldout_fraction", self.heldout_fraction)
        if self.tokenizer not in KINDS:
            raise ValueError(f"tokenizer must be one of {', '.join(KINDS)}, got {self.tokenizer!r}")
        owners = {"vocab_size": "bpe", "tokenizer_file": "bpe", "alphabet": "char"}
        for name, owner in owners.items():
            if getattr(self, name) not in (None, "") and self.tokenizer != owner:
                raise ValueError(f"{name} belongs to tokenizer={owner}, not tokenizer={self.tokenizer}")
        if self.vocab_size is not None and self.vocab_size < MIN_BPE_VOCAB and not self.tokenizer_file:  # asked for
            raise ValueError(f"vocab_size must be at least {MIN_BPE_VOCAB} (the 256 bytes and a merge)")
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError(f"alphabet must not repeat a character, got {self.alphabet!r}")
        if self.corpus_sha256 and not re.fullmatch(r"[0-9a-f]{64}", self.corpus_sha256):
            raise ValueError(f"corpus_sha256 must be 64 lowercase hex digits, got {self.corpus_sha256!r}")


class TextVocabulary:
    """A text run's tokens, from its tokenizer alone: the task's `vocab`, and all that sampling needs once the run's
    corpus is gone (a run keeps its tokenizer)."""

    def __init__(self, params: TextParams, tokenizer: Tokenizer | None = None):
        self.params, self.tokenizer = params, tokenizer or recorded_tokenizer(params)
        if self.tokenizer is None:
            raise ValueError(f"the run records no {params.tokenizer} tokenizer, and its corpus cannot be read")

    def __len__(self) -> int:
        return self.tokenizer.vocab_size

    def encode(self, text: str) -> list[int]:
        unknown = self.tokenizer.unknown_characters(text)
        if unknown:
            raise ValueError(
                f"characters not in the vocabulary: {unknown!r} (the char tokenizer knows the "
                f"{len(self.params.alphabet)} characters of the training chunks)"
            )
        return self.tokenizer.encode(text).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def token_labels(self, ids: Sequence[int]) -> list[str]:
        table = self.tokenizer.token_bytes()
        labels = (table[i].decode("utf-8", "backslashreplace") for i in ids)  # "\\n", "\\u2028": a label is seen
        return ["".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in label) for label in labels]

    def example_prompts(self) -> list[str]:
        raise ValueError(
            "the default prompts are held-out text of the run's corpus, which is not at hand: give --prompt"
        )


class TextTask(Task):
    name = "text"
    description = "language model on your own text (--data FILE or DIR): char, byte or BPE tokens, bits per char"
    Params = TextParams
    primary_metric = "bits_per_char"
    higher_is_better = False
    eval_fixed = (
        "heldout_fraction", "chunk_size", "corpus_sha256", "tokenizer", "vocab_size", "alphabet", "tokenizer_file"
    )  # fmt: skip
    SALT: ClassVar[bytes] = b"text"  # a named case of text keeps its own, and with it its held-out chunks
    CORPUS_NOUN: ClassVar[str] = "text corpus"
    FINAL_EVAL_LIMIT: ClassVar[int | None] = FINAL_EVAL_WINDOWS  # None: every held-out window

    def __init__(self, params: TextParams):
        path = self.corpus_path(params)
        try:
            corpus = Corpus.find(path, params.glob, self.CORPUS_NOUN)
        except ValueError as error:
            moved = params.corpus_sha256 and not path.exists()  # a trained run's corpus, since moved or deleted
            hint = " (moved? a run reads its corpus where it trained; eval takes --set data=NEW_PATH)"
            raise ValueError(f"{error}{hint}" if moved else str(error)) from None
        digest = corpus.sha256()  # reading it checks that it is text
        window = params.block_size + 1
        if corpus.size < window:  # no tokenizer makes more tokens than bytes: refused before any preparation
            raise ValueError(
                f"the corpus ({corpus.size:,} byte{'s' * (corpus.size != 1)}) is smaller than a training window of "
                f"{window} tokens"
            )
        if params.corpus_sha256 and params.corpus_sha256 != digest:
            raise ValueError(
                f"the corpus at {corpus.path} is not the text this run was trained on (sha256 {digest}, recorded "
                f"{params.corpus_sha256}): it has changed, or data or glob names other text"
            )
        # A BPE of n bytes has at most 256 + n - 1 tokens; the tokenizer library allocates for more, and may abort.
        if params.vocab_size is not None and params.vocab_size > 256 + corpus.size - 1:
            raise ValueError(
                f"vocab_size {params.vocab_size:,} is more than the corpus can give: a BPE of its {corpus.size:,} "
                f"bytes has at most {256 + corpus.size - 1:,} tokens (the 256 bytes and one merge per pair of them)"
            )
        split = {"corpus_sha256": digest, "chunk_size": params.chunk_size, "salt": self.SALT.hex()}
        root = cache_root(params.cache_dir)
        self.tokenizer, tokenizer_file = self._tokenizer(params, corpus, split, root)
        held = self.tokenizer.vocab_size
        if params.tokenizer_file and params.vocab_size is not None and params.vocab_size != held:
            raise ValueError(
                f"vocab_size {params.vocab_size:,} is not the {held:,} tokens of tokenizer_file "
                f"{params.tokenizer_file}: a tokenizer file fixes the vocabulary; give one of them"
            )
        entry = root / key_of(split | {"tokenizer_sha256": self.tokenizer.identity()})
        self.cache = prepare(entry, corpus, params.chunk_size, digest, self.tokenizer, self.SALT, params.in_memory)
        alphabet = self.tokenizer.alphabet if isinstance(self.tokenizer, CharTokenizer) else ""
        vocab_size = self.tokenizer.vocab_size if params.tokenizer == "bpe" else None  # held, not asked for
        resolved = dataclasses.replace(
            params, corpus_sha256=digest, alphabet=alphabet, tokenizer_file=tokenizer_file, vocab_size=vocab_size
        )
        super().__init__(resolved)
        self.vocab = TextVocabulary(self.params, self.tokenizer)
        self.char_counts, self.byte_counts = token_sizes(self.tokenizer)
        self._index_chunks()
        self._windows: dict[str, torch.Tensor] = {}

    def corpus_path(self, params: TextParams) -> Path:
        if not params.data:
            raise ValueError(
                "the text task needs a corpus: --data PATH (a UTF-8 file, or a directory with --set glob=PATTERN)"
            )
        return Path(params.data).expanduser()

    def _tokenizer(self, params: TextParams, corpus: Corpus, split: dict, root: Path) -> tuple[Tokenizer, str]:
        """The tokenizer a run recorded, or the one learned from the training chunks, and the file of a BPE."""
        recorded = recorded_tokenizer(params)
        if recorded is not None:
            return recorded, params.tokenizer_file
        kind, vocab_size = params.tokenizer, params.vocab_size or DEFAULT_BPE_VOCAB
        settings = split | {"heldout_fraction": params.heldout_fraction, "tokenizer": kind, "vocab_size": vocab_size}
        path = root / "tokenizers" / f"{key_of(settings)}.{kind}"
        file = str(path) if kind == "bpe" else ""
        with contextlib.suppress(OSError, ValueError):  # absent or damaged: learned again
            return load_tokenizer(kind, path.read_bytes()), file
        say(f"learning the {kind} tokenizer from the training chunks; it is kept at {path}")
        read = hashlib.sha256()  # to check the text against the corpus sha256
        pieces = corpus.read_chunks(params.chunk_size, read, "training split", leave=False)
        training = [0]  # chunks read

        def texts() -> Iterator[str]:
            for text, data in pieces:
                if not is_heldout(data, params.heldout_fraction, self.SALT):
                    training[0] += 1
                    yield text

        learned = learn_alphabet(texts()) if kind == "char" else train_bpe(texts(), vocab_size)
        if read.hexdigest() != split["corpus_sha256"]:  # the corpus was edited after it was hashed
            raise ValueError(changed_while_read("learned from"))
        if not training[0]:
            raise ValueError(
                f"heldout_fraction {params.heldout_fraction:g} holds out every chunk of {params.chunk_size} "
                "characters, leaving none to learn the tokenizer from or train on; lower it or use a longer text"
            )
        learned = CharTokenizer(learned) if kind == "char" else learned
        write_atomically(path, learned.serialize())
        return learned, file

    def files(self) -> dict[str, bytes]:
        return {"tokenizer_file": self.tokenizer.serialize()} if isinstance(self.tokenizer, BpeTokenizer) else {}

    def _index_chunks(self) -> None:
        """The chunks that hold a window, by split; refused when a side has none."""
        cache, window = self.cache, self.block_size + 1
        lengths = np.diff(cache.offsets)
        usable = lengths >= window
        heldout = cache.hashes < self.params.heldout_fraction
        self.chunk_offsets = torch.from_numpy(cache.offsets[:-1].copy())
        self.chunk_tokens = torch.from_numpy(lengths)
        self._chunks = {
            "train": torch.from_numpy(np.flatnonzero(usable & ~heldout)),
            "heldout": torch.from_numpy(np.flatnonzero(usable & heldout)),
        }
        size = f"{int(cache.chars.sum()):,} characters, {int(cache.offsets[-1]):,} tokens"
        if cache.offsets[-1] < window:
            raise ValueError(f"the corpus ({size}) is smaller than a training window of {window} tokens")
        if not usable.any():
            raise ValueError(
                f"no chunk of {self.params.chunk_size} characters holds a window of {window} tokens "
                "(block_size + 1); raise chunk_size or lower block_size"
            )
        short = np.flatnonzero(~usable)
        if len(short) > 1 or (len(short) == 1 and short[0] != len(lengths) - 1):  # more than a short last chunk
            share = float(cache.chars[short].sum() / cache.chars.sum())
            say(
                f"{len(short):,} of {len(lengths):,} chunks ({share:.1%} of the characters) hold fewer than "
                f"block_size + 1 = {window} tokens: they are neither trained on nor scored; a larger chunk_size "
                "keeps them"
            )
        for split, numbers in self._chunks.items():
            if not len(numbers):
                side, chunks = "training" if split == "train" else "held-out", "chunk" + "s" * (len(lengths) != 1)
                raise ValueError(
                    f"the corpus ({size}, {len(lengths):,} {chunks} of {self.params.chunk_size} characters) has no "
                    f"{side} chunk holding a window; use a longer text, a smaller chunk_size or another "
                    f"heldout_fraction (now {self.params.heldout_fraction:g})"
                )

    def chunks(self, split: str) -> torch.Tensor:
        if split not in self._chunks:
            raise ValueError(f"split must be one of {', '.join(self._chunks)}, got {split!r}")
        return self._chunks[split]

    def _gather(self, starts: torch.Tensor) -> torch.Tensor:
        index = starts.numpy()[:, None] + np.arange(self.block_size + 1)
        return torch.from_numpy(self.cache.tokens[index].astype(np.int64))

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.chunks("train")
        chunk = train[torch.randint(len(train), (batch_size,), generator=generator, device="cpu")]
        n_offsets = self.chunk_tokens[chunk] - self.block_size  # windows that fit in each chunk
        draws = torch.rand(batch_size, generator=generator, device="cpu")
        offsets = (draws * n_offsets).long().clamp_(max=n_offsets - 1)
        seq = self._gather(self.chunk_offsets[chunk] + offsets)
        return Batch(seq[:, :-1], seq[:, 1:])

    def evaluation_windows(self, split: str, limit: int | None, seed: int = 0) -> torch.Tensor:
        """(N, 2): each evaluation window's start and how many of its first targets an earlier one scored; all of
        the split's, or a fixed sample of `limit`."""
        if split not in self._windows:
            self._windows[split] = self._all_windows(self.chunks(split))
        windows = self._windows[split]
        if limit is None or limit >= len(windows):
            return windows
        generator = torch.Generator().manual_seed(seed)
        return windows[torch.randperm(len(windows), generator=generator, device="cpu")[:limit].sort().values]

    def _all_windows(self, chunks: torch.Tensor) -> torch.Tensor:
        """Windows that score tokens 1 .. n-1 of each chunk of n tokens once each: at 0, bs, 2 bs, ... and a
        last one ending at the chunk's end, whose targets already scored are skipped."""
        bs = self.block_size
        n = self.chunk_tokens[chunks]
        per_chunk = (n - 2) // bs + 1  # ceil((n - 1) / bs)
        owner = torch.repeat_interleave(torch.arange(len(chunks), device=chunks.device), per_chunk)
        first = torch.cumsum(per_chunk, 0) - per_chunk
        windows = torch.arange(len(owner), device=owner.device)
        at = (windows - first[owner]) * bs  # where each window would start, unshifted
        start = torch.minimum(at, n[owner] - 1 - bs)
        return torch.stack((self.chunk_offsets[chunks][owner] + start, at - start), dim=1)

    def window_batch(self, windows: torch.Tensor) -> Batch:
        """Inputs and next-token targets of evaluation windows (N, 2), the targets already scored ignored."""
        seq = self._gather(windows[:, 0])
        targets = seq[:, 1:].clone()
        targets[torch.arange(self.block_size, device=windows.device) < windows[:, 1:]] = IGNORE_INDEX
        return Batch(seq[:, :-1], targets)

    def scored_text(self, windows: torch.Tensor) -> tuple[int, int]:
        """Characters and bytes that the scored targets of `windows` decode to."""
        chars = size = 0
        for part in windows.split(4 * EVAL_BATCH):
            targets = self.window_batch(part).targets
            ids = targets[targets != IGNORE_INDEX].numpy()
            chars += int(self.char_counts[ids].sum())
            size += int(self.byte_counts[ids].sum())
        return chars, size

    def evaluate(self, model: GPT, split: str, device, limit: int | None = None) -> dict[str, float]:
        self.check_evaluation(model, split, limit)
        model.config.check_positions(self.block_size, "each evaluation window")
        windows = self.evaluation_windows(split, limit)
        scores = score_examples(model, windows, self.window_batch, device, EVAL_BATCH, split)
        chars, size = self.scored_text(windows)
        bits = scores.loss * scores.targets / math.log(2)
        metrics = {"loss": scores.loss, "bits_per_char": bits / chars, "bits_per_byte": bits / size}
        return metrics | {"examples": float(len(windows))}

    def probe_batch(self) -> Batch:
        """Held-out windows that score every target, the early ones of the ICL score included."""
        windows = self.evaluation_windows("heldout", 2 * PROBE_EXAMPLES, seed=3)
        return self.window_batch(windows[windows[:, 1] == 0][:PROBE_EXAMPLES])

    def probes(self, model: GPT, cache: ProbeCache | None) -> dict[str, float]:
        return induction_probes(model, cache)

    @property
    def block_size(self) -> int:
        return self.params.block_size

    def defaults(self) -> Defaults:
        return Defaults(
            model=self.model_config(n_layer=4, n_head=4, n_embd=128),
            train={"batch_size": 12, "eval_limit": 200, "final_eval_limit": self.FINAL_EVAL_LIMIT},
        )

    def heldout_texts(self, n_tokens: int, n: int) -> list[str]:
        """The first `n_tokens` of each of the first `n` held-out chunks the vocabulary can encode back (a char
        tokenizer may not know a held-out character); the first chunk's when none can. A character the last
        byte-level token cuts is left out (decoded, it would be U+FFFD)."""
        first, texts, table = None, [], self.tokenizer.token_bytes()
        for start in self.chunk_offsets[self.chunks("heldout")].tolist():
            ids = self.cache.tokens[start : start + n_tokens].tolist()
            text = b"".join(table[i] for i in ids).decode("utf-8", errors="ignore")  # a chunk starts a character
            first = text if first is None else first
            if not self.tokenizer.unknown_characters(text):
                texts.append(text)
            if len(texts) == n:
                break
        return texts or [first]

    def example_prompts(self) -> list[str]:
        return self.heldout_texts(PROMPT_TOKENS, 1)

    def attention_examples(self, n: int) -> list[str]:
        return self.heldout_texts(self.block_size, n)


def recorded_tokenizer(params: TextParams) -> Tokenizer | None:
    """The tokenizer that `params` pin, or None: one to learn."""
    if params.tokenizer == "byte" or params.alphabet:  # an alphabet belongs to tokenizer=char
        return load_tokenizer(params.tokenizer, params.alphabet.encode())
    if params.tokenizer_file:  # which belongs to tokenizer=bpe
        path = Path(params.tokenizer_file).expanduser()
        try:
            return BpeTokenizer(path.read_bytes())
        except OSError as error:
            raise ValueError(f"cannot read tokenizer_file {path}: {error.strerror or error}") from None
        except ValueError as error:
            raise ValueError(f"tokenizer_file {path}: {error}") from None
    return None
