"""The public toolkit for task authors (gpt_tasks.symbols), reachable from `gpt_tasks` itself."""

from __future__ import annotations

import re

import pytest
import torch

import gpt_tasks
from gpt_tasks import DIGITS, CharVocab, as_bytes, digits_of, get_task, one_digit_changes


def test_what_plugins_and_trainers_need_is_exported_from_the_package():
    needed = {"CharVocab", "DIGITS", "digits_of", "as_bytes", "build_params", "field_types", "coerce"}
    assert needed | {"default_registry", "Defaults"} <= set(gpt_tasks.__all__)
    assert all(hasattr(gpt_tasks, name) for name in gpt_tasks.__all__)
    assert gpt_tasks.default_registry() is gpt_tasks.default_registry()  # discovered once


def test_one_digit_changes_are_every_number_differing_in_exactly_one_digit():
    changes = one_digit_changes(torch.tensor([5, 0]), 2, 3)  # base 3: "12" and "00"
    assert changes.tolist() == [[2, 8, 3, 4], [3, 6, 1, 2]]  # "02", "22", "10", "11"; "10", "20", "01", "02"


@pytest.mark.parametrize(("name", "params"), [("sort", {"length": 4, "vocab": 5}), ("addition", {"digits": 2})])
def test_a_builtin_tasks_single_token_corruptions_change_one_prompt_token_each(name, params):
    task = get_task(name, **params)
    ids = task.split.evaluation_ids("heldout", 20)
    variants = task.single_token_corruptions(ids)  # (20, K)
    p = task.prompt_length
    clean = task.sequences(ids)[:, None, :p]
    corrupted = task.sequences(variants.flatten()).view(*variants.shape, -1)[..., :p]
    assert (clean != corrupted).sum(dim=-1).eq(1).all()
    assert len(set(variants[0].tolist())) == variants.shape[1]  # no change listed twice


def test_digits_of_writes_numbers_most_significant_first_in_any_base():
    ids = torch.tensor([0, 7, 123, 999])
    assert digits_of(ids, 3, 10).tolist() == [[0, 0, 0], [0, 0, 7], [1, 2, 3], [9, 9, 9]]
    assert digits_of(torch.tensor([5, 35]), 2, 36).tolist() == [[0, 5], [0, 35]]
    assert "".join(DIGITS[d] for d in digits_of(torch.tensor([255]), 2, 16)[0]) == "ff"


def test_as_bytes_is_one_byte_per_symbol_whatever_the_dtype():
    rows = torch.tensor([[1, 2, 3], [9, 0, 255]])
    assert as_bytes(rows) == [b"\x01\x02\x03", b"\x09\x00\xff"]
    assert as_bytes(rows.to(torch.int32)) == as_bytes(rows)


def test_char_vocab_round_trips_and_names_unknown_characters():
    vocab = CharVocab("ab+=")
    assert len(vocab) == 4 and vocab.encode("a+b=") == [0, 2, 1, 3]
    assert vocab.decode([3, 0]) == "=a"
    with pytest.raises(ValueError, match=r"characters not in the vocabulary: 'cz' \(vocabulary: 'ab\+='\)"):
        vocab.encode("zac")
    with pytest.raises(ValueError, match="distinct"):
        CharVocab("aba")


def test_a_task_takes_vocab_size_encode_decode_and_token_labels_from_its_vocab():
    task = get_task("repeats", vocab=5)  # tokens "abcde"
    assert task.vocab.alphabet == "abcde" and task.vocab_size == 5
    assert task.encode("ebb") == [4, 1, 1] and task.decode([4, 1, 1]) == "ebb"
    assert task.token_labels([0, 4]) == ["a", "e"]
    with pytest.raises(ValueError, match=r"characters not in the vocabulary: 'f' \(vocabulary: 'abcde'\)"):
        task.encode("abf")


@pytest.mark.parametrize(("name", "ids", "said"), [
    ("sort", [-1, 0], "token id -1 is outside the vocabulary (ids 0 to 9)"),  # read '9' from the end
    ("sort", [0, 10], "token id 10 is outside the vocabulary (ids 0 to 9)"),
    ("modadd", [5, 114], "token id 114 is outside the vocabulary (ids 0 to 113)"),  # decoded as '114'
])  # fmt: skip
def test_decoding_an_id_outside_the_vocabulary_names_it(name, ids, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        get_task(name).decode(ids)
