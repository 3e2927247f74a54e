"""The plugin contract's page (README.md, "The plugin contract") says what the code is: its version, every kernel
slot with its signature, and every member a task must implement."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpt_core import GPT, KERNEL_SIGNATURES, KERNEL_SLOTS, GPTConfig
from gpt_core.plugins import API_VERSION
from gpt_tasks import PromptAnswerTask, Task, get_task

README = Path(__file__).resolve().parents[1] / "README.md"


def contract_page() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## The plugin contract")
    return text[start : text.index("\n## ", start + 1)]


def test_the_page_declares_the_version_the_code_has():
    assert contract_page().startswith(f"## The plugin contract, version {API_VERSION}\n")


def test_the_page_gives_every_kernel_slot_with_its_signature():
    assert tuple(KERNEL_SIGNATURES) == KERNEL_SLOTS
    for slot, signature in KERNEL_SIGNATURES.items():
        assert f"| `{slot}` | {signature} |" in contract_page(), slot


def test_the_page_names_every_member_a_task_must_implement():
    for member in Task.__abstractmethods__ | PromptAnswerTask.__abstractmethods__:
        assert f"`{member}" in contract_page(), member


def test_the_page_says_which_members_the_base_class_derives_from_self_vocab():
    for member in ("vocab_size", "encode", "decode", "token_labels"):
        assert not getattr(getattr(Task, member), "__isabstractmethod__", False), member
        assert f"`{member}" in contract_page(), member
    assert "`self.vocab`" in contract_page()


@pytest.mark.parametrize("name", ["sort", "addition", "modadd", "repeats"])
@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"split": "validation"}, "split must be 'train' or 'heldout', got 'validation'"),
        ({"limit": -1}, "limit must be None (the whole split) or a whole number >= 1, got -1"),  # scored all but one
        ({"limit": 0}, "limit must be None (the whole split) or a whole number >= 1, got 0"),  # ZeroDivisionError
        ({"vocab_size": 3}, "the model has 3 token ids and the"),  # IndexError from the embedding
    ],
    ids=["misspelt split", "negative limit", "zero limit", "smaller vocabulary"],
)
def test_evaluate_refuses_what_it_cannot_score_in_one_line(name, arguments, said):
    task = get_task(name)
    vocab_size = arguments.get("vocab_size", task.vocab_size)
    model = GPT(GPTConfig(vocab_size=vocab_size, block_size=task.block_size, n_layer=1, n_head=2, n_embd=16))
    with pytest.raises(ValueError) as raised:
        task.evaluate(model, arguments.get("split", "heldout"), "cpu", arguments.get("limit", 10))
    assert str(raised.value).startswith(said), str(raised.value)
