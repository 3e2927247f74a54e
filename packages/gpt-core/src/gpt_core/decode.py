"""Decoding in steps whose shapes never change, so that a GPU can record one step as a CUDA graph and replay it per
token: each step writes its keys and values at a position held on the device, attends over every slot of the cache,
the unfilled ones masked, and advances that position itself, reading nothing back to the host."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gpt_core.model import GPT, MultiHeadAttention

WARMUP_STEPS = 3  # eager steps on a side stream before the capture, as PyTorch's CUDA-graph recipe asks


def static_step_refusal(model: GPT) -> str | None:
    """Why `model` cannot decode with the static step (None: it can): the step fires no hooks and applies no dropout."""
    if model._hooks:
        return "the static decoding step fires no hooks; remove them or decode with static=False"
    if model.training and model.config.dropout:
        return "the static decoding step applies no dropout; call model.eval()"
    return None


class StaticDecoder:
    """Decodes `model` one token per row at a time in steps of fixed shapes, replaying a CUDA graph with `graph`
    (CUDA only). `positions` (B, max_length): a randomized model's ids; None: 0, 1, 2, ..."""

    def __init__(self, model: GPT, batch_size: int, max_length: int, positions: Tensor | None = None,
                 graph: bool = False):  # fmt: skip
        refusal = static_step_refusal(model)
        if refusal is not None:
            raise ValueError(refusal)
        device = model.wte.weight.device
        if graph and device.type != "cuda":
            raise ValueError(f"a CUDA graph needs a model on a CUDA device, not {device.type}")
        model.config.check_positions(max_length, "the decoder's cache")
        self.model, self.kernels, self.graph = model, model.kernels, graph
        self.cache = model.new_cache(batch_size, max_length, positions)  # keys, values (L, B, H, T_max, d), the ids
        self.slots = torch.arange(max_length, device=device)  # (T_max,) every position of the cache
        self.at = torch.zeros(1, dtype=torch.long, device=device)  # (1,) where the next step writes
        self.token = torch.zeros(batch_size, 1, dtype=torch.long, device=device)  # (B, 1) the next step's input
        self.recorded: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None  # the recorded step's output (B, 1, V), rewritten by every replay

    def prefill(self, idx: Tensor) -> Tensor:
        """Run the prompt (B, T), or its next part, through the model's own cached forward; its logits (B, T, V)."""
        logits = self.model(idx, cache=self.cache).logits
        self.at.fill_(self.cache.length)
        return logits

    def step(self, token: Tensor) -> Tensor:
        """Feed each row's next token (B, 1); the logits (B, 1, V) after it, which the next step overwrites."""
        if token.shape != self.token.shape:
            raise ValueError(f"a step takes one token per row, {tuple(self.token.shape)}, got {tuple(token.shape)}")
        self.cache.check_fits(token.shape[0], 1)  # the host's count, checked before a write out of the buffers
        self.cache.advance(1)
        self.token.copy_(token)
        if not self.graph:
            return self._step()
        with torch.cuda.device(self.token.device):  # streams and graphs belong to the current device
            if self.recorded is None:
                self._capture()
            self.recorded.replay()
        return self.logits

    def _capture(self) -> None:
        """Warm up on a side stream (each step putting the write position back), then record one step."""
        start = self.at.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._step()
                self.at.copy_(start)
        torch.cuda.current_stream().wait_stream(side)
        self.recorded = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.recorded):  # recorded, not run: the write position stays where it is
            self.logits = self._step()

    def _step(self) -> Tensor:
        """The model's forward for one new token per row, every shape fixed by the cache's size."""
        model = self.model
        ids = self.cache.positions  # (B, T_max) or None
        where = self.at if ids is None else ids.index_select(1, self.at)  # (1,) or (B, 1)
        hidden = self.slots > self.at  # (T_max,) the slots not yet written
        x = model.wte(self.token)  # (B, 1, C)
        if model.wpe is not None:
            x = x + model.wpe(where)  # (1, C) broadcast over B, or (B, 1, C)
        for block in model.blocks:
            a = self._attend(block.attn, block.ln1(x), where, hidden)
            x = x + a if block.residual else a
            if block.mlp is not None:
                m = block.mlp(block.ln2(x))
                x = x + m if block.residual else m
        self.at.add_(1)
        return model.lm_head(model.ln_f(x))  # (B, 1, V)

    def _attend(self, attn: MultiHeadAttention, x: Tensor, where: Tensor, hidden: Tensor) -> Tensor:
        """`attn` for one new token per row (B, 1, C) over every slot of the cache, the hidden ones masked:
        softmax(q k^T / sqrt(d) + mask) v by the kernel set's softmax (an attention kernel takes no mask)."""
        B, _, C = x.shape
        q, k, v = (t.view(B, 1, attn.n_head, -1).transpose(1, 2) for t in attn.qkv(x).split(C, 2))  # (B, H, 1, d)
        if attn.rope is not None:
            q, k = attn.rope(q, where), attn.rope(k, where)
        k, v = self.cache.write(attn.layer, k, v, self.at)  # (B, H, T_max, d)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, 1, T_max)
        weights = self.kernels.sampling_softmax(scores.masked_fill(hidden, float("-inf")))
        y = (weights @ v).transpose(1, 2).reshape(B, 1, C)  # (B, 1, C)
        return attn.proj(y)
