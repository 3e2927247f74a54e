"""gpt_core: a decoder-only GPT whose every internal piece is hand-written on tensors and autograd. Read `model.py`,
then `reference.py` (each kernel as its definition), then `kernels/` (the fast kernels, and why each is fast)."""

from gpt_core.generate import generate, next_token
from gpt_core.hooks import BLOCK_POINTS, HookFn, block_hook
from gpt_core.kernels import (
    DEFAULT_KERNELS,
    FAST_KERNELS,
    KERNEL_SETS,
    KERNEL_SIGNATURES,
    KERNEL_SLOTS,
    REFERENCE_KERNELS,
    Kernels,
)
from gpt_core.kernels.attention import attention, attention_weights, causal_mask
from gpt_core.kernels.cross_entropy import cross_entropy
from gpt_core.kernels.gelu import gelu
from gpt_core.kernels.layer_norm import layer_norm
from gpt_core.kernels.linear import to_device
from gpt_core.kernels.softmax import log_softmax, softmax
from gpt_core.kv_cache import KVCache
from gpt_core.model import GELU, GPT, MLP, Block, Embedding, GPTConfig, GPTOutput, LayerNorm, Linear, MultiHeadAttention
from gpt_core.positions import POSITION_ENCODINGS, RotaryEmbedding
from gpt_core.reference import IGNORE_INDEX, dropout

__all__ = [
    "BLOCK_POINTS",
    "DEFAULT_KERNELS",
    "FAST_KERNELS",
    "GELU",
    "GPT",
    "IGNORE_INDEX",
    "KERNEL_SETS",
    "KERNEL_SIGNATURES",
    "KERNEL_SLOTS",
    "MLP",
    "POSITION_ENCODINGS",
    "REFERENCE_KERNELS",
    "Block",
    "Embedding",
    "GPTConfig",
    "GPTOutput",
    "HookFn",
    "KVCache",
    "Kernels",
    "LayerNorm",
    "Linear",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "attention",
    "attention_weights",
    "block_hook",
    "causal_mask",
    "cross_entropy",
    "dropout",
    "gelu",
    "generate",
    "layer_norm",
    "log_softmax",
    "next_token",
    "softmax",
    "to_device",
]

__version__ = "0.3.9"
