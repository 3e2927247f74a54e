"""GPT-2 in the Hugging Face layout: its config.json and tensor names, to and from gpt-core's (whose default
architecture is GPT-2's). Hugging Face stores the four projections as Conv1D, weight (in, out), and prefixes names
with `transformer.` (or not, in OpenAI's converted checkpoints); gpt-train reads and writes the files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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

ALIASES = {
    "num_attention_heads": "n_head",
    "hidden_size": "n_embd",
    "max_position_embeddings": "n_positions",
    "num_hidden_layers": "n_layer",
}
"""transformers.GPT2Config's attribute_map: the other name a config.json may give a setting by -> GPT-2's own."""

DROPOUT_RATES = ("resid_pdrop", "embd_pdrop", "attn_pdrop")

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


class DropoutRatesDiffer(ValueError):
    """config.json's three dropout rates differ, and the caller did not set its own: gpt-core has one."""


def config_from_hf(hf: Mapping[str, Any], own_dropout: bool = False) -> GPTConfig:
    """The GPTConfig of a GPT-2 config.json; ValueError naming a setting gpt-core cannot compute. A setting may be
    given by transformers' other name for it (`ALIASES`), and is refused where both names give different values.
    GPT-2 has three dropout rates, gpt-core one: config.json's where the three agree. Where they differ the config is
    refused (DropoutRatesDiffer), unless `own_dropout`, for a caller that sets its own rate or needs none (inference,
    which has no dropout): the model then has dropout 0.0."""
    if hf.get("model_type") != "gpt2":
        raise ValueError(f"model_type is {hf.get('model_type')!r}, not 'gpt2'")
    c = HF_DEFAULTS | _unaliased(hf)
    _require(c["activation_function"] in TANH_GELUS, c, "activation_function", "the tanh GELU (gelu_new)")
    _require(c["layer_norm_epsilon"] == LAYER_NORM_EPS, c, "layer_norm_epsilon", f"{LAYER_NORM_EPS}")
    _require(c["n_inner"] in (None, 4 * c["n_embd"]), c, "n_inner", "null or 4 x n_embd")
    _require(c["scale_attn_weights"] is True, c, "scale_attn_weights", "true (scores over sqrt(head size))")
    _require(c["scale_attn_by_inverse_layer_idx"] is False, c, "scale_attn_by_inverse_layer_idx", "false")
    _require(c["add_cross_attention"] is False, c, "add_cross_attention", "false (a decoder only)")
    rate, *others = (c[name] for name in DROPOUT_RATES)
    if any(other != rate for other in others):  # nan differs from every rate, itself too
        if not own_dropout:
            listed = ", ".join(f"{name}={c[name]}" for name in DROPOUT_RATES)
            raise DropoutRatesDiffer(f"gpt-core has one dropout rate; config.json has {listed}")
        rate = 0.0
    return GPTConfig(
        vocab_size=c["vocab_size"],
        block_size=c["n_positions"],
        n_layer=c["n_layer"],
        n_head=c["n_head"],
        n_embd=c["n_embd"],
        dropout=rate,
        tie_weights=c["tie_word_embeddings"],
    )


def _unaliased(hf: Mapping[str, Any]) -> dict[str, Any]:
    """config.json with each setting under GPT-2's own name; ValueError where both names give different values."""
    settings = dict(hf)
    for alias, name in ALIASES.items():
        if alias not in settings:
            continue
        value = settings.pop(alias)
        if name in settings and settings[name] != value:
            raise ValueError(f"{name} is {settings[name]!r} but {alias}, its other name, is {value!r}; give one")
        settings.setdefault(name, value)
    return settings


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


def unprefixed(names: Iterable[str]) -> dict[str, str]:
    """Each tensor name without GPT2LMHeadModel's `transformer.` -> the name as stored; ValueError naming both names
    where a file stores one tensor twice, with the prefix and without (neither copy is chosen silently)."""
    found: dict[str, str] = {}
    for name in names:
        short = name.removeprefix(PREFIX)
        if short in found:
            raise ValueError(f"tensors {PREFIX + short!r} and {short!r} are one GPT-2 tensor, stored twice; keep one")
        found[short] = name
    return found


def state_dict_from_hf(tensors: Mapping[str, Tensor], config: GPTConfig) -> dict[str, Tensor]:
    """A Hugging Face GPT-2 state dict -> gpt-core's parameters of a GPT of `config`, Conv1D weights transposed
    (views), a tied head left out; ValueError naming the first tensor that is unknown, missing, misshapen or stored
    twice. A tied model's head is its embedding: an `lm_head.weight` stored beside it must have its shape and hold its
    values (as a checkpoint converted from torch's `.bin`, which names the one tensor twice, does); one that differs
    is refused, its config calling tied a model that is not. (transformers loads such a file untied, with a warning;
    here `tie_word_embeddings: false` says so. Tensors on the meta device, shapes alone, have no values to compare.)"""
    shapes = expected_shapes(config)
    our_names = {_hf_name(name).removeprefix(PREFIX): name for name in shapes}
    stored = unprefixed(tensors)
    ours: dict[str, Tensor] = {}
    for name, hf_name in stored.items():
        tensor = tensors[hf_name]
        layer, _, inner = name.removeprefix("h.").partition(".")
        if name.startswith("h.") and inner in IGNORED_BUFFERS:
            continue
        tied_head = name == "lm_head.weight" and config.tie_weights
        our_name = "wte.weight" if tied_head else our_names.get(name)
        if our_name is None:
            if name.startswith("h.") and layer.isdigit() and f"h.0.{inner}" in our_names:
                raise ValueError(f"tensor {hf_name!r} does not belong to a model of {config.n_layer} layers")
            raise ValueError(f"tensor {hf_name!r} is not part of a GPT-2 language model")
        value = tensor.t() if _is_conv1d(name) else tensor
        if tuple(value.shape) != shapes[our_name]:
            wanted = shapes[our_name][::-1] if _is_conv1d(name) else shapes[our_name]
            raise ValueError(f"tensor {hf_name!r} has shape {tuple(tensor.shape)}; config.json's model needs {wanted}")
        if not tied_head:
            ours[our_name] = value
    missing = [name for name in shapes if name not in ours]
    if missing:
        raise ValueError(f"{len(missing)} tensor(s) missing, e.g. {_hf_name(missing[0])!r}")
    head = stored.get("lm_head.weight")
    if config.tie_weights and head is not None and not _same_values(tensors[head], ours["wte.weight"]):
        raise ValueError(
            f"config.json ties the head to the embedding (tie_word_embeddings: true), but tensor {head!r} differs "
            f"from {stored['wte.weight']!r}; for a head of its own set tie_word_embeddings to false"
        )
    return ours


def _same_values(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors hold the same values, whatever their dtypes (nan matching nan); true of shapes alone."""
    if a.is_meta or b.is_meta:
        return True
    if a.dtype == b.dtype and torch.equal(a, b):  # the common case, without isclose's temporaries
        return True
    common = torch.promote_types(a.dtype, b.dtype)
    return bool(torch.isclose(a.to(common), b.to(common), rtol=0, atol=0, equal_nan=True).all())


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
