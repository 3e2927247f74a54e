"""shakespeare: the text task on tiny-shakespeare (char-rnn's input.txt, downloaded once and checked), with its own
split salt (its held-out chunks are the ones it has always held out) and the loss as its primary metric."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.request import urlopen

from gpt_tasks.builtin.text import TextParams, TextTask
from gpt_tasks.text.cache import user_cache, write_atomically

CORPUS_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DOWNLOAD_TIMEOUT = 15.0  # seconds
PROMPTS = ("ROMEO:", "JULIET:", "KING RICHARD III:", "MENENIUS:")


def cache_path() -> Path:
    return user_cache() / "tinyshakespeare.txt"


def download(path: Path) -> Path:
    """Fetch the corpus into `path`, checking its sha256; nothing is left behind on failure."""
    try:
        with urlopen(CORPUS_URL, timeout=DOWNLOAD_TIMEOUT) as response:
            data = response.read()
    except (OSError, ValueError) as error:  # URLError, timeouts and refused connections are OSErrors
        raise ValueError(
            f"tiny-shakespeare is not available offline and the download failed ({error}); pass the file with "
            "`--data PATH` (or `--set data=PATH`, or get_task('shakespeare', data=PATH)); the file is the canonical "
            f"char-rnn input.txt from {CORPUS_URL}"
        ) from error
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    if digest != CORPUS_SHA256:
        raise ValueError(
            f"downloaded {CORPUS_URL} has sha256 {digest}, expected {CORPUS_SHA256}; the download was deleted"
        )
    write_atomically(path, data)
    return path


class ShakespeareTask(TextTask):
    name = "shakespeare"
    description = "language model on tiny-shakespeare (char tokens by default; loss in nats, bits per char)"
    primary_metric = "loss"
    SALT = b"shakespeare"
    CORPUS_NOUN = "tiny-shakespeare file"
    FINAL_EVAL_LIMIT = None  # its 1,744 held-out windows, every one, as always

    def corpus_path(self, params: TextParams) -> Path:
        """`data` when given, else the cached download (fetched and verified first if absent)."""
        if params.data:
            return super().corpus_path(params)
        path = cache_path()
        return path if path.is_file() else download(path)

    def example_prompts(self) -> list[str]:
        prompts = [p for p in PROMPTS if not self.tokenizer.unknown_characters(p)]
        return prompts or super().example_prompts()
