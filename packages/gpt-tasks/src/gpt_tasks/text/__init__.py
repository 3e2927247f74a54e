"""Text corpora for language-model tasks: reading a corpus (`corpus`), tokenizers (`tokenizer`) and the token
cache that training reads through a memmap (`cache`). The task itself is `gpt_tasks.builtin.text.TextTask`."""

from gpt_tasks.text.corpus import Corpus, chunks
from gpt_tasks.text.tokenizer import (
    BpeTokenizer,
    ByteTokenizer,
    CharTokenizer,
    learn_alphabet,
    load_tokenizer,
    token_sizes,
    train_bpe,
)

__all__ = [
    "BpeTokenizer",
    "ByteTokenizer",
    "CharTokenizer",
    "Corpus",
    "chunks",
    "learn_alphabet",
    "load_tokenizer",
    "token_sizes",
    "train_bpe",
]
