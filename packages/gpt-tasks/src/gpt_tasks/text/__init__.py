"""Text corpora for language-model tasks: reading a corpus (`corpus`), tokenizers (`tokenizer`) and the token
cache that training reads through a memmap (`cache`). The task itself is `gpt_tasks.builtin.text.TextTask`."""

from gpt_tasks.text.cache import TokenCache, cache_root
from gpt_tasks.text.corpus import Corpus, chunks
from gpt_tasks.text.tokenizer import (
    KINDS,
    BpeTokenizer,
    ByteTokenizer,
    CharTokenizer,
    Tokenizer,
    learn_alphabet,
    load_tokenizer,
    token_sizes,
    train_bpe,
)

__all__ = [
    "KINDS",
    "BpeTokenizer",
    "ByteTokenizer",
    "CharTokenizer",
    "Corpus",
    "TokenCache",
    "Tokenizer",
    "cache_root",
    "chunks",
    "learn_alphabet",
    "load_tokenizer",
    "token_sizes",
    "train_bpe",
]
