"""The static decoding step on the triton set: its softmax is a Triton kernel, which a CUDA graph records like any
other. Without a GPU the kernels run in Triton's interpreter, on CPU tensors, in float64."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels then run on the CPU
pytest.importorskip("triton")

from gpt_core import GPT, GPTConfig, generate  # noqa: E402
from gpt_core.decode import StaticDecoder  # noqa: E402
from gpt_core.kernels.triton import TRITON_KERNELS  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.float64 if DEVICE == "cpu" else torch.float32
TOLERANCE = 1e-12 if DEVICE == "cpu" else 1e-4


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_static_steps_on_the_triton_set_give_the_cached_steps_logits_and_tokens(pos):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=32, pos=pos)
    model = GPT(config, TRITON_KERNELS).to(DEVICE, DTYPE).eval()
    idx = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    decoder = StaticDecoder(model, 2, 8, graph=DEVICE == "cuda")
    cache = model.new_cache(2, 8)
    with torch.no_grad():
        assert (decoder.prefill(idx[:, :2]) - model(idx[:, :2], cache=cache).logits).abs().max() <= TOLERANCE
        for t in range(2, 8):
            static = decoder.step(idx[:, t : t + 1]).clone()
            assert (static - model(idx[:, t : t + 1], cache=cache).logits).abs().max() <= TOLERANCE
    prompt = idx[:, :2]
    assert torch.equal(generate(model, prompt, 6, 0.0, static=True), generate(model, prompt, 6, 0.0, static=False))
