"""GPT-2 directories in the Hugging Face layout (config.json, model.safetensors, tokenizer.json): reading one into
gpt-core, and writing a model as one. The names are mapped by `gpt_core.gpt2`; this module does the files, checks a
directory against its safetensors header before building anything, and never unpickles (see docs/gpt2.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from gpt_core import GPT, GPTConfig
from gpt_core.gpt2 import (
    IGNORED_BUFFERS,
    PREFIX,
    DropoutRatesDiffer,
    config_from_hf,
    hf_config,
    hf_state_dict,
    state_dict_from_hf,
    unprefixed,
)
from gpt_tasks import field_types
from gpt_tasks.text.tokenizer import BpeTokenizer
from gpt_train.checkpoint import HEADER_ERRORS, WEIGHT_DTYPES, load_weights, read_safetensors, safetensors_header
from gpt_train.errors import TrainError
from gpt_train.files import WriteError, write_atomically, write_json_atomically
from gpt_viz.errors import in_the_way
from gpt_viz.files import temporary_path

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"  # what lets transformers' AutoTokenizer load tokenizer.json
EXPORTED = (CONFIG, WEIGHTS, TOKENIZER, TOKENIZER_CONFIG)  # every file an export may write
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
SHARD_INDEX = "model.safetensors.index.json"
TOKENIZER_PARAMS = ("tokenizer", "tokenizer_file", "vocab_size")  # what --init-from sets to the directory's
END_OF_TEXT = "<|endoftext|>"
BOOLEANS = ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention", "tie_word_embeddings")
NUMBERS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon")


class HFError(TrainError):
    """A directory that is not a GPT-2 gpt-core can load, or a run that cannot be written as one."""


# reading -----------------------------------------------------------------------------------------
def read_config(directory: Path, own_dropout: bool = False) -> GPTConfig:
    """The model of a GPT-2 directory, checked against its weights' header. `own_dropout`: the caller sets its own
    dropout rate, or needs none (see `config_from_hf`)."""
    if not directory.is_dir():
        raise HFError(f"{directory} is not a directory")
    path = directory / CONFIG
    if not path.is_file():
        raise HFError(f"{directory} has no {CONFIG}; a Hugging Face model directory holds {CONFIG} and {WEIGHTS}")
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HFError(f"cannot read {path} ({error})") from None
    if not isinstance(hf, dict):
        raise HFError(f"{path} is not a JSON object")
    try:
        _check_types(hf)
        config = config_from_hf(hf, own_dropout)
    except DropoutRatesDiffer as error:  # a rate to train with, which --set dropout gives
        raise HFError(f"{path}: {error}: choose the one to train with, --set dropout=RATE") from None
    except (ValueError, TypeError) as error:
        raise HFError(f"{path}: not a GPT-2 gpt-core can compute: {error}") from None
    _check_fits_weights(directory, config)
    return config


def _check_types(hf: dict[str, Any]) -> None:
    """Booleans and rates typed as strictly as GPTConfig types its integers: JSON's true/false, and numbers."""
    for key in BOOLEANS:
        if key in hf and not isinstance(hf[key], bool):
            raise ValueError(f"{key} must be true or false, got {hf[key]!r}")
    for key in NUMBERS:
        value = hf.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number, got {value!r}")


def _check_fits_weights(directory: Path, config: GPTConfig) -> None:
    """config.json's model against model.safetensors' header (dtypes and every shape): no model larger than the file
    is ever built."""
    path = _weights_path(directory)
    try:
        raw = safetensors_header(path)
    except HEADER_ERRORS as error:
        raise HFError(f"{path} is not a readable safetensors file ({error})") from None
    try:
        stored = unprefixed(raw)  # one tensor stored twice, with `transformer.` and without, is refused here
    except ValueError as error:
        raise HFError(f"{path}: {error}") from None
    weights = {name: raw[stored[name]] for name in stored if not _is_buffer(name)}
    for name, (dtype, _) in weights.items():
        if dtype not in WEIGHT_DTYPES:
            raise HFError(
                f"{path}: tensor {stored[name]!r} is {dtype}; GPT-2 weights are floats ({', '.join(WEIGHT_DTYPES)})"
            )
    layers = {name.split(".")[1] for name in weights if name.startswith("h.")}
    if len(layers) != config.n_layer:
        raise HFError(f"{directory}: config.json has n_layer={config.n_layer}, {WEIGHTS} holds {len(layers)} layers")
    tables = {"wte.weight": (config.vocab_size, "vocab_size"), "wpe.weight": (config.block_size, "n_positions")}
    for name, (rows, key) in tables.items():
        wanted = (rows, config.n_embd)
        held = weights.get(name, (None, None))[1]
        if held != wanted:
            raise HFError(
                f"{directory}: config.json's {key} x n_embd is {wanted}, but {WEIGHTS} holds {name} of shape {held}"
            )
    shapes = {name: torch.empty(shape, device="meta") for name, (_, shape) in raw.items()}
    try:
        state_dict_from_hf(shapes, config)
    except ValueError as error:
        raise HFError(f"{path}: {error}") from None


def _weights_path(directory: Path) -> Path:
    path = directory / WEIGHTS
    if path.is_file():
        return path
    if (directory / SHARD_INDEX).is_file():
        raise HFError(f"{directory} holds a sharded checkpoint ({SHARD_INDEX}); gpt-train reads one {WEIGHTS}")
    pickle = next((name for name in PICKLES if (directory / name).is_file()), None)
    if pickle is not None:
        raise HFError(
            f"{directory} holds only {pickle}, a pickle checkpoint, which gpt-train does not load (unpickling can "
            f"run code); convert it where you trust it: GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR)"
        )
    raise HFError(f"{directory} has no {WEIGHTS}")


def read_weights(directory: Path, config: GPTConfig) -> dict[str, torch.Tensor]:
    path = _weights_path(directory)
    try:
        tensors, _ = read_safetensors(path)
    except HEADER_ERRORS as error:
        raise HFError(f"{path} is not a readable safetensors file ({error})") from None
    try:
        weights = state_dict_from_hf(tensors, config)
    except ValueError as error:
        raise HFError(f"{path}: {error}") from None
    for name, tensor in tensors.items():  # checked here too: a resumed --init-from run reads no config first
        if _is_buffer(name.removeprefix(PREFIX)):
            continue
        if not tensor.is_floating_point():
            raise HFError(f"{path}: tensor {name!r} is {tensor.dtype}; GPT-2 weights are floats")
        if not torch.isfinite(tensor).all():
            raise HFError(f"{path}: tensor {name!r} holds values that are not finite (nan or inf)")
    return weights


def _is_buffer(name: str) -> bool:
    first, _, rest = name.partition(".")
    return first == "h" and rest.partition(".")[2] in IGNORED_BUFFERS


def load_model(directory: Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> GPT:
    """The directory's model in eval mode, for inference: config.json's dropout rates do not matter."""
    config = read_config(directory, own_dropout=True)
    weights = read_weights(directory, config)
    torch.manual_seed(0)  # the draws are overwritten; seeded so building the model disturbs nothing by chance
    model = GPT(config).to(dtype)
    load_weights(model, weights)
    return model.to(device).eval()


def read_tokenizer(directory: Path) -> BpeTokenizer:
    path = directory / TOKENIZER
    if not path.is_file():
        raise HFError(f"{directory} has no {TOKENIZER} (the Hugging Face tokenizers file of GPT-2's BPE)")
    try:
        return BpeTokenizer(path.read_bytes())
    except (OSError, ValueError) as error:
        raise HFError(f"{path}: {error}") from None


class Pretrained:
    """A GPT-2 directory, with its tokenizer, as the `task` of `gpt-train sample --hf`: text in, text out."""

    def __init__(self, directory: Path, device: torch.device | str = "cpu"):
        self.model = load_model(directory, device)
        self.tokenizer = read_tokenizer(directory)
        vocab = self.model.config.vocab_size
        if self.tokenizer.vocab_size != vocab:
            raise HFError(f"{directory}: {TOKENIZER} has {self.tokenizer.vocab_size} tokens, the model {vocab}")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).tolist()

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


# --init-from ---------------------------------------------------------------------------------------
def tokenizer_params(directory: Path, params_type: type, given: dict[str, Any]) -> dict[str, Any]:
    """For a task that reads a tokenizer file (text), the parameters that make it read the directory's."""
    read_config(directory, own_dropout=True)  # no GPT-2 is named as such before its tokenizer is looked for
    if "tokenizer_file" not in field_types(params_type):
        return {}
    tokenizer = read_tokenizer(directory)  # a directory without one is named as such before any --set is blamed
    chosen = sorted(set(given) & set(TOKENIZER_PARAMS))
    if chosen:
        raise HFError(f"--init-from {directory} brings its own {TOKENIZER}; drop --set {', '.join(chosen)}")
    path = str((directory / TOKENIZER).absolute())
    return {"tokenizer": "bpe", "tokenizer_file": path, "vocab_size": tokenizer.vocab_size}


def pretrained_model_config(directory: Path, vocab_size: int, block_size: int, given: dict[str, Any]) -> GPTConfig:
    """A run's model from `directory`: its GPT-2 shape on windows of `block_size`; only dropout may be set, and must
    be where config.json's three rates differ."""
    refused = sorted(set(given) - {"dropout"})
    if refused:
        raise HFError(f"--init-from {directory} fixes the model; drop --set {', '.join(refused)}")
    config = read_config(directory, own_dropout="dropout" in given)
    if vocab_size != config.vocab_size:
        raise HFError(f"the task has {vocab_size} tokens, but the model in {directory} has {config.vocab_size}")
    limit = config.block_size
    if block_size > limit:
        raise HFError(f"block_size {block_size} is longer than the model's {limit} positions ({directory})")
    return dataclasses.replace(config, block_size=block_size, max_positions=0 if block_size == limit else limit)


# writing ---------------------------------------------------------------------------------------
def write_directory(model: GPT, out: Path, tokenizer: BpeTokenizer | None = None) -> list[Path]:
    """Write `model` (and the tokenizer's files) as a GPT-2 directory `out`, new or empty; returns the files written.
    A failed export leaves nothing behind: a new `out` is built under a temporary name, in parent folders made for it
    and removed again; an empty one (`.`, a link, a folder with its own permissions) is written into and emptied again
    on failure."""
    try:
        config = hf_config(model.config)
        tensors = hf_state_dict(model)
    except ValueError as error:
        raise HFError(f"cannot export as GPT-2: {error}") from None
    if tokenizer is not None:
        end = tokenizer.hf.token_to_id(END_OF_TEXT)
        config |= {"bos_token_id": end, "eos_token_id": end}
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HFError(f"{out} already exists and is not an empty directory; choose a new one")
    blocked = in_the_way(out)
    if blocked is not None:
        raise HFError(f"cannot export to {out}: {blocked}")
    fresh = not out.exists()
    building = temporary_path(out) if fresh else out
    made: list[Path] = []  # the parent folders this export made, outermost first
    try:
        if fresh:
            _make_folders(building.parent, made)
            building.mkdir()
        names = _write_files(building, config, tensors, tokenizer)
        if fresh:
            os.rename(building, out)
    except BaseException as error:  # Ctrl-C too: nothing is left half-exported
        left = _remove_export(out, building if fresh else None, made)
        if not isinstance(error, (WriteError, OSError)):
            raise
        reason = error.reason if isinstance(error, WriteError) else error.strerror
        kept = f"could not remove {', '.join(map(str, left))}" if left else "nothing was left there"
        raise WriteError(f"cannot export to {out} ({reason or error}); {kept}") from None
    return [out / name for name in names]


def _make_folders(folder: Path, made: list[Path]) -> None:
    """Make `folder` and its missing parents, each one made added to `made` at once (outermost first), so that a
    failure part-way still knows which to remove."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:  # made meanwhile by another process: not this export's to remove
            continue
        made.append(path)


def _remove_export(out: Path, building: Path | None, made: list[Path]) -> list[Path]:
    """Remove what a failed export wrote: the folder it was `building`, or else the files it may have written into the
    empty `out`, then the parent folders it `made`; returns what could not be removed. Removing a file that is not
    there is no failure, whatever the error says of it (a read-only filesystem says EROFS, not ENOENT)."""
    if building is not None:
        shutil.rmtree(building, ignore_errors=True)
        paths = [building]
    else:
        paths = [out / name for name in EXPORTED]
        for path in paths:
            with contextlib.suppress(OSError):  # whether it is there is asked below, not of the error
                path.unlink()
    left = [path for path in paths if os.path.lexists(path)]
    for folder in reversed(made):
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # not empty (something else now in it) or not removable: named, never emptied
            left.append(folder)
    return left


def _write_files(
    folder: Path, config: dict[str, Any], tensors: dict[str, torch.Tensor], tokenizer: BpeTokenizer | None
) -> list[str]:
    write_json_atomically(folder / CONFIG, config)
    save = lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"})
    write_atomically(folder / WEIGHTS, save, what="weights", failures=(OSError, SafetensorError))
    if tokenizer is None:
        return [CONFIG, WEIGHTS]
    write_atomically(folder / TOKENIZER, lambda tmp: tmp.write_bytes(tokenizer.serialize()))
    settings: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config["n_positions"]}
    if tokenizer.hf.token_to_id(END_OF_TEXT) is not None:
        settings |= {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT}
    write_json_atomically(folder / TOKENIZER_CONFIG, settings)
    return list(EXPORTED)
