"""The plugin contract's page (README.md, "The plugin contract") says what the code is: its version, every kernel
slot with its signature, and every member a task must implement."""

from __future__ import annotations

from pathlib import Path

from gpt_core import KERNEL_SIGNATURES, KERNEL_SLOTS
from gpt_core.plugins import API_VERSION
from gpt_tasks import PromptAnswerTask, Task

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
