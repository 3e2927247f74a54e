"""The model reads in one sitting: model.py and reference.py together stay short, and from `GPT.forward`
to the reference attention's arithmetic are three calls (block, attention module, kernel)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import gpt_core
from gpt_core import GPT, REFERENCE_KERNELS, GPTConfig, reference

SRC = Path(gpt_core.__file__).parent


def test_the_model_and_the_reference_kernels_are_under_450_lines_together():
    lines = sum(len((SRC / name).read_text().splitlines()) for name in ("model.py", "reference.py"))
    assert lines < 450, lines


def _gpt_core_frames_above(frame, stop) -> list[str]:
    """The gpt_core functions between `frame` and the first frame running `stop` (torch's own frames,
    such as Module.__call__, are not calls a reader follows)."""
    chain = []
    while frame is not None and frame.f_code is not stop:
        if Path(frame.f_code.co_filename).is_relative_to(SRC):
            chain.append(frame.f_code.co_qualname)
        frame = frame.f_back
    assert frame is not None, "GPT.forward is not on the stack"
    return chain[::-1]


def test_three_calls_lead_from_the_forward_to_the_reference_attention():
    model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8), REFERENCE_KERNELS)
    chains = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is reference.attention.__code__:
            chains.append(_gpt_core_frames_above(frame, GPT.forward.__code__))

    sys.setprofile(profile)
    try:
        model(torch.randint(7, (1, 5)))
    finally:
        sys.setprofile(None)
    assert len(chains) == 1
    expected = ["Block.forward", "MultiHeadAttention.forward", "attention"]
    assert chains[0] == expected
