"""GPT-2 in the Hugging Face layout: its config.json and tensor names, to and from gpt-core's (whose default
architecture is GPT-2's). Hugging Face stores the four projections as Conv1D, weight (in, out), and prefixes names
with `transformer.` (or not, in OpenAI's converted checkpoints); gpt-train reads and writes the files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from gpt_core.model import GPT, GPTConfig

LAYER_NORM_EPS = 1e-5
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")  # Hugging Face's names for the tanh GELU

HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": LAYER_NORM_EPS,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
"""transformers.GPT2Config's defaults: what a config.json that leaves a key out means."""

PREFIX = "transformer."
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # stored as Conv1D, weight (in, out)
BLOCK_NAMES = {
    "ln_1": "ln1",
    "attn.c_attn": "attn.qkv",
    "attn.c_proj": "attn.proj",
    "ln_2": "ln2",
    "mlp.c_fc": "mlp.fc",
    "mlp.c_proj": "mlp.proj",
}
"""A block's modules: Hugging Face name -> gpt-core name."""

IGNORED_BUFFERS = ("attn.bias", "attn.masked_bias")
"""Per-block buffers older checkpoints hold (the causal mask and its fill value): no weights."""


def config_from_hf(hf: Mapping[str, Any]) -> GPTConfig:
    """The GPTConfig of a GPT-2 config.json; ValueError naming a setting gpt-core cannot compute."""
    if hf.get("model_type") != "gpt2":
        raise ValueError(f"model_type is {hf.get('model_type')!r}, not 'gpt2'")
    c = HF_DEFAULTS | dict(hf)
    _require(c["activation_function"] in TANH_GELUS, c, "activation_function", "the tanh GELU (gelu_new)")
    _require(c["layer_norm_epsilon"] == LAYER_NORM_EPS, c, "layer_norm_epsilon", f"{LAYER_NORM_EPS}")
    _require(c["n_inner"] in (None, 4 * c["n_embd"]), c, "n_inner", "null or 4 x n_embd")
    _require(c["scale_attn_weights"] is True, c, "scale_attn_weights", "true (scores over sqrt(head size))")
    _require(c["scale_attn_by_inverse_layer_idx"] is False, c, "scale_attn_by_inverse_layer_idx", "false")
    _require(c["add_cross_attention"] is False, c, "add_cross_attention", "false (a decoder only)")
    rates = {name: c[name] for name in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(rates.values())) != 1:
        listed = ", ".join(f"{k}={v}" for k, v in rates.items())
        raise ValueError(f"gpt-core has one dropout rate; config.json has {listed}")
    return GPTConfig(
        vocab_size=c["vocab_size"],
        block_size=c["n_positions"],
        n_layer=c["n_layer"],
        n_head=c["n_head"],
        n_embd=c["n_embd"],
        dropout=c["resid_pdrop"],
        tie_weights=c["tie_word_embeddings"],
    )


def _require(holds: bool, config: dict[str, Any], key: str, wanted: str) -> None:
    if not holds:
        raise ValueError(f"{key} is {config[key]!r}; gpt-core computes GPT-2 with {wanted}")


def not_gpt2(config: GPTConfig) -> str | None:
    """Why a model of `config` has no GPT-2 equivalent (None when it has one)."""
    reasons = {
        "pos": config.pos != "learned",
        "layernorm": not config.layernorm,
        "residual": not config.residual,
        "bias": not config.bias,
        "mlp": not config.mlp,
        "randomized_positions": config.randomized_positions,
    }
    named = [f"{key}={getattr(config, key)}" for key, differs in reasons.items() if differs]
    if not named:
        return None
    return f"{', '.join(named)}: GPT-2 has learned positions, LayerNorm, residual connections, biases and MLPs"


def _check_gpt2(config: GPTConfig) -> None:
    reason = not_gpt2(config)
    if reason is not None:
        raise ValueError(f"not a GPT-2 architecture ({reason})")


def hf_config(config: GPTConfig) -> dict[str, Any]:
    """The Hugging Face config.json (a dict) of a GPT-2 model of `config`; ValueError if it is not GPT-2's."""
    _check_gpt2(config)
    return HF_DEFAULTS | {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.position_limit,
        "n_ctx": config.position_limit,  # older readers' name for it (llama.cpp's converter reads only this)
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "tie_word_embeddings": config.tie_weights,
        "bos_token_id": None,
        "eos_token_id": None,
    }


def expected_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of a GPT of `config` and its shape, by gpt-core name (the tied head not repeated)."""
    with torch.device("meta"):  # shapes only: nothing allocated, nothing drawn
        model = GPT(config)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def state_dict_from_hf(tensors: Mapping[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
    """A Hugging Face GPT-2 state dict -> gpt-core's parameters of a GPT of `config`, Conv1D weights transposed
    (views), a tied head left out; ValueError naming the first tensor that is unknown, missing or misshapen."""
    shapes = expected_shapes(config)
    our_names = {_hf_name(name).removeprefix(PREFIX): name for name in shapes}
    ours: dict[str, Tensor] = {}
    for hf_name, tensor in tensors.items():
        name = hf_name.removeprefix(PREFIX)
        layer, _, inner = name.removeprefix("h.").partition(".")
        if (name.startswith("h.") and inner in IGNORED_BUFFERS) or (name == "lm_head.weight" and config.tie_weights):
            continue
        if name not in our_names:
            if name.startswith("h.") and layer.isdigit() and f"h.0.{inner}" in our_names:
                raise ValueError(f"tensor {hf_name!r} does not belong to a model of {config.n_layer} layers")
            raise ValueError(f"tensor {hf_name!r} is not part of a GPT-2 language model")
        our_name = our_names[name]
        value = tensor.t() if _is_conv1d(name) else tensor
        if tuple(value.shape) != shapes[our_name]:
            wanted = shapes[our_name][::-1] if _is_conv1d(name) else shapes[our_name]
            raise ValueError(f"tensor {hf_name!r} has shape {tuple(tensor.shape)}; config.json's model needs {wanted}")
        ours[our_name] = value
    missing = [name for name in shapes if name not in ours]
    if missing:
        raise ValueError(f"{len(missing)} tensor(s) missing, e.g. {_hf_name(missing[0])!r}")
    return ours


def _is_conv1d(hf_name: str) -> bool:
    return any(hf_name.endswith(f"{module}.weight") for module in CONV1D)


def _hf_name(our_name: str) -> str:
    """The Hugging Face name (with GPT2LMHeadModel's prefix) of a gpt-core parameter name."""
    if our_name == "lm_head.weight":
        return our_name
    first, _, rest = our_name.partition(".")
    if first != "blocks":
        return PREFIX + our_name
    layer, _, inner = rest.partition(".")
    module, _, kind = inner.rpartition(".")
    hf_module = next(hf for hf, ours in BLOCK_NAMES.items() if ours == module)
    return f"{PREFIX}h.{layer}.{hf_module}.{kind}"


def hf_state_dict(model: GPT) -> dict[str, Tensor]:
    """The model's parameters under GPT2LMHeadModel's names, contiguous copies on the CPU, a tied head once."""
    _check_gpt2(model.config)
    tensors = {}
    for name, param in model.named_parameters():  # a tied head is the embedding: listed once
        hf_name = _hf_name(name)
        value = param.detach().t() if _is_conv1d(hf_name) else param.detach()
        tensors[hf_name] = value.to("cpu").clone(memory_format=torch.contiguous_format)
    return tensors
