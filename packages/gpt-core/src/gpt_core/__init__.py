"""gpt_core: a decoder-only GPT whose every internal piece is hand-written on tensors and autograd."""

from gpt_core.attention import MultiHeadAttention, attention, attention_weights, causal_mask, sdpa
from gpt_core.functional import IGNORE_INDEX, cross_entropy, dropout, gelu, layer_norm, log_softmax, softmax
from gpt_core.generate import generate, next_token
from gpt_core.hooks import BLOCK_POINTS, HookFn, block_hook
from gpt_core.kernels import DEFAULT_KERNELS, KERNEL_SIGNATURES, KERNEL_SLOTS, Kernels
from gpt_core.kv_cache import KVCache
from gpt_core.layers import GELU, MLP, Embedding, LayerNorm, Linear
from gpt_core.model import GPT, POSITION_ENCODINGS, Block, GPTConfig, GPTOutput
from gpt_core.rope import RotaryEmbedding
from gpt_core.verification import REFERENCE_SIGNATURES, Row, format_report, kernel_report, verification_report

__all__ = [
    "BLOCK_POINTS",
    "DEFAULT_KERNELS",
    "GELU",
    "GPT",
    "IGNORE_INDEX",
    "KERNEL_SIGNATURES",
    "KERNEL_SLOTS",
    "MLP",
    "POSITION_ENCODINGS",
    "REFERENCE_SIGNATURES",
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
    "Row",
    "attention",
    "attention_weights",
    "block_hook",
    "causal_mask",
    "cross_entropy",
    "dropout",
    "format_report",
    "gelu",
    "generate",
    "kernel_report",
    "layer_norm",
    "log_softmax",
    "next_token",
    "sdpa",
    "softmax",
    "verification_report",
]

__version__ = "0.2.0"
