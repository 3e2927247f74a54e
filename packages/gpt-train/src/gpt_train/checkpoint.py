"""Checkpoints: one safetensors file holding weights, optimiser state and RNG state.

Written atomically (a temporary file in the same directory, fsync, then os.replace), so a
crash mid-write leaves the previous checkpoint whole. Loaded without unpickling anything:
safetensors holds only tensors, and the rest (step, optimiser hyperparameters) is JSON in its
metadata, together with a sha256 of every tensor's bytes that catches corruption the file
format alone would not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gpt_core import GPTConfig
from gpt_train.errors import TrainError
from gpt_train.files import WriteError, write_atomically


class CheckpointError(TrainError):
    """A checkpoint that is missing, damaged, or of another run. (One that cannot be written is a WriteError.)"""


@dataclass
class TrainingState:
    """What a resumed run needs beyond the configuration."""

    task: str
    step: int
    elapsed: float
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    rng: dict[str, torch.Tensor]
    grokfast: dict[str, torch.Tensor] = field(default_factory=dict)  # Grokfast's gradient averages, by parameter
    precision: dict[str, torch.Tensor] = field(default_factory=dict)  # fp16's loss scale (gpt_train.precision)


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _flatten(state: TrainingState) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    tensors = {f"model/{k}": v for k, v in state.model.items()}
    tensors |= {f"rng/{k}": v for k, v in state.rng.items()}
    tensors |= {f"grokfast/{k}": v for k, v in state.grokfast.items()}
    tensors |= {f"precision/{k}": v for k, v in state.precision.items()}
    for index, slots in state.optimizer["state"].items():
        tensors |= {f"optim/{index}/{k}": v for k, v in slots.items()}
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    meta = {
        "task": state.task,
        "step": str(state.step),
        "elapsed": repr(state.elapsed),
        "param_groups": json.dumps(state.optimizer["param_groups"]),
        "sha256": _digest(tensors),
    }
    return tensors, meta


def save_checkpoint(path: Path, state: TrainingState, what: str = "checkpoint") -> None:
    """Write `state` to `path` atomically: a failed write (a full disk, say) leaves the previous checkpoint."""
    tensors, meta = _flatten(state)
    write = lambda tmp: save_file(tensors, str(tmp), metadata=meta)
    write_atomically(path, write, what=what, failures=(OSError, SafetensorError))


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with safe_open(str(path), framework="pt") as archive:
            meta = archive.metadata() or {}
            tensors = {name: archive.get_tensor(name) for name in archive.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({error})") from None
    if "sha256" not in meta or _digest(tensors) != meta["sha256"]:
        raise CheckpointError(f"checkpoint {path} is corrupted (its contents do not match their checksum)")
    return tensors, meta


def load_checkpoint(path: Path, task: str) -> TrainingState:
    """Read and verify a checkpoint written by `save_checkpoint` for a run of `task`."""
    tensors, meta = _read(path)
    if meta.get("task") != task:
        raise CheckpointError(f"checkpoint {path} belongs to a {meta.get('task')!r} run, not {task!r}")
    optimizer_state: dict[int, dict[str, torch.Tensor]] = {}
    model, rng, grokfast, precision = {}, {}, {}, {}
    for key, value in tensors.items():
        kind, _, rest = key.partition("/")
        if kind == "model":
            model[rest] = value
        elif kind == "rng":
            rng[rest] = value
        elif kind == "grokfast":
            grokfast[rest] = value
        elif kind == "precision":
            precision[rest] = value
        elif kind == "optim":
            index, _, slot = rest.partition("/")
            optimizer_state.setdefault(int(index), {})[slot] = value
    try:
        param_groups = json.loads(meta["param_groups"])
        step, elapsed = int(meta["step"]), float(meta["elapsed"])
    except (KeyError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} has unreadable metadata ({error})") from None
    optimizer = {"state": optimizer_state, "param_groups": param_groups}
    return TrainingState(task, step, elapsed, model, optimizer, rng, grokfast, precision)


def save_snapshot(path: Path, task: str, step: int, weights: dict[str, torch.Tensor]) -> None:
    """The weights alone at `step`, in the checkpoint format (checksummed, written atomically); a WriteError
    naming the snapshot if it, or its folder, cannot be written."""
    try:
        path.parent.mkdir(exist_ok=True)
    except OSError as error:
        reason = error.strerror or str(error)
        raise WriteError(f"cannot create {path.parent} ({reason})", reason) from None
    state = TrainingState(task, step, 0.0, weights, {"state": {}, "param_groups": []}, {})
    save_checkpoint(path, state, what="snapshot")


WEIGHT_DTYPES = ("F16", "BF16", "F32", "F64")
"""safetensors' names of the dtypes a model's weights are saved in."""


HEADER_ERRORS = (SafetensorError, OSError, ValueError)
"""What `safetensors_header` raises on a file that is not a readable safetensors file."""


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's dtype (safetensors' name: F32, BOOL, ...) and shape, from the file's header alone (one of
    HEADER_ERRORS where the file cannot be read as safetensors)."""
    with safe_open(str(path), framework="pt") as archive:
        slices = {name: archive.get_slice(name) for name in archive.keys()}  # noqa: SIM118 (not a dict)
        return {name: (part.get_dtype(), tuple(part.get_shape())) for name, part in slices.items()}


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A checkpoint's `safetensors_header`, or a CheckpointError saying it is missing or damaged."""
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        return safetensors_header(path)
    except HEADER_ERRORS as error:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({error})") from None


def check_fits_checkpoint(config: GPTConfig, path: Path) -> None:
    """A run's model settings (config.json) against its checkpoint's header, read without loading a tensor:
    every weight a float, and the sizes that bound the model (its layers, the token table vocab_size x n_embd,
    the learned position table) as the checkpoint holds them. So a config.json whose model the checkpoint does
    not hold (a billion-wide embedding, a million layers) is one line, never built or allocated; the model then
    built is the checkpoint's size, and `load_weights` compares every other shape."""
    weights = {name.removeprefix("model/"): slot for name, slot in read_header(path).items() if name[:6] == "model/"}
    for name, (dtype, _) in weights.items():
        if dtype not in WEIGHT_DTYPES:
            raise CheckpointError(f"checkpoint {path}: weight {name} is {dtype}, not a float")
    layers = {name.split(".")[1] for name in weights if name.startswith("blocks.")}
    if len(layers) != config.n_layer:
        raise CheckpointError(
            f"config.json has n_layer={config.n_layer}, but checkpoint {path} holds {len(layers)} layers"
        )
    tables = {"wte.weight": (config.vocab_size, "vocab_size")}
    if config.pos == "learned":
        tables["wpe.weight"] = (config.position_limit, "max_positions" if config.max_positions else "block_size")
    for name, (rows, key) in tables.items():
        wanted, held = (rows, config.n_embd), weights.get(name, (None, None))[1]
        if held != wanted:
            raise CheckpointError(
                f"config.json's {key} x n_embd is {wanted}, but checkpoint {path} holds {name} of shape {held}"
            )


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy saved weights into `model`, refusing a checkpoint whose parameters do not match it."""
    params = dict(model.named_parameters())
    if set(params) != set(weights):
        raise CheckpointError("checkpoint does not match this run's model (different parameters)")
    with torch.no_grad():
        for name, param in params.items():
            if param.shape != weights[name].shape:
                raise CheckpointError(f"checkpoint does not match this run's model ({name}: {tuple(param.shape)})")
            param.copy_(weights[name])
