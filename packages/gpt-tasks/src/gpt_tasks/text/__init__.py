"""Text corpora for language-model tasks: reading a corpus (`corpus`), tokenizers (`tokenizer`) and the token
cache that training reads through a memmap (`cache`). The task itself is `gpt_tasks.builtin.text.TextTask`."""
