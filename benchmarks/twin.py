"""The built-in twin: the same GPT with PyTorch's own kernels in place of the hand-written ones.

Only the four places where gpt-core hand-writes a kernel change: LayerNorm, GELU, the attention
call and the loss. Everything else (parameters, Linear, embeddings, the block structure, the
weights themselves) is shared by construction, so a timing difference is the kernels' alone.
"""

from __future__ import annotations

import copy
import dataclasses

import torch.nn.functional as F

from gpt_core import GELU, GPT, IGNORE_INDEX, LayerNorm, MultiHeadAttention


class BuiltinLayerNorm(LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class BuiltinGELU(GELU):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def builtin_attention(q, k, v, causal, dropout_p=0.0):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout_p)


class BuiltinAttention(MultiHeadAttention):
    """Its kernel table's attention is PyTorch's (set by `builtin_twin`)."""


class BuiltinGPT(GPT):
    def loss(self, logits, targets):
        return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE_INDEX)


SWAPS = {LayerNorm: BuiltinLayerNorm, GELU: BuiltinGELU, MultiHeadAttention: BuiltinAttention, GPT: BuiltinGPT}


KERNELS = {"layernorm": LayerNorm, "gelu": GELU, "attention": MultiHeadAttention, "loss": GPT}


def builtin_twin(model: GPT, only: str | None = None) -> GPT:
    """A deep copy of `model` (same weights) whose hand-written kernels are PyTorch's built-ins;
    with `only` (a key of KERNELS), just that one kind is swapped."""
    swapped = SWAPS if only is None else {KERNELS[only]: SWAPS[KERNELS[only]]}
    twin = copy.deepcopy(model)
    for module in twin.modules():
        if type(module) in swapped:
            module.__class__ = swapped[type(module)]
        if isinstance(module, BuiltinAttention):
            module.kernels = dataclasses.replace(module.kernels, attention=builtin_attention)
    return twin
