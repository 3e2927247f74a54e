"""Checkpoints: one safetensors file of weights, optimiser and RNG state, written atomically and read without
unpickling; the rest is JSON in its metadata, with a sha256 of every tensor's bytes."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gpt_core import GPTConfig
from gpt_train.errors import TrainError
from gpt_train.files import WriteError, is_utf8, write_atomically

T = TypeVar("T")


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
    cooldown_from: int | None = None  # the step that reached `cooldown_trigger`, once one has
    loss: float | None = None  # the last step's training loss: final.json's, when only the final evaluation is left
    world_size: int | None = 1  # the processes that trained it (torchrun's); None: not recorded
    threads: int | None = None  # the CPU threads that trained it, on a CPU (their count orders its sums)
    model_config: dict[str, Any] | None = None  # config.json's model: an edit there would change what weights compute


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


KINDS = ("model", "rng", "grokfast", "precision")  # saved as `<kind>/<name>`, the optimiser's as `optim/<n>/<slot>`


def save_checkpoint(path: Path, state: TrainingState, what: str = "checkpoint") -> None:
    """Write `state` to `path` atomically: a failed write (a full disk, say) leaves the previous checkpoint."""
    tensors = {f"{kind}/{k}": v for kind in KINDS for k, v in getattr(state, kind).items()}
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
    if state.cooldown_from is not None:
        meta["cooldown_from"] = str(state.cooldown_from)
    if state.loss is not None:
        meta["loss"] = repr(state.loss)
    if state.world_size is not None:
        meta["world_size"] = str(state.world_size)
    if state.threads is not None:
        meta["threads"] = str(state.threads)
    if state.model_config is not None:
        meta["model"] = json.dumps(state.model_config, sort_keys=True)
    write = lambda tmp: save_file(tensors, str(tmp), metadata=meta)
    write_atomically(path, write, what=what, failures=(OSError, SafetensorError))


def _opened(path: Path, read: Callable[[Path], T]) -> T:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if not is_utf8(path):
        shown = os.fsencode(path).decode("utf-8", "replace")
        raise CheckpointError(f"checkpoint {shown}: safetensors opens only paths in UTF-8; rename the directory")
    try:
        return read(path)
    except HEADER_ERRORS as error:
        raise CheckpointError(f"checkpoint {path} is truncated or corrupted ({error})") from None


def read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The file's tensors and metadata, read again if it was replaced meanwhile: safetensors opens the path twice
    (header, then data), so a run saving its checkpoint between the two would hand a reader two files' halves."""
    for _ in range(READ_TRIES):
        before = _identity(path)
        try:
            with safe_open(str(path), framework="pt") as archive:
                read = {name: archive.get_tensor(name) for name in archive.keys()}, archive.metadata() or {}  # noqa: SIM118
        except HEADER_ERRORS:
            if _identity(path) == before:
                raise
            continue
        if _identity(path) == before:
            return read
    raise CheckpointError(f"{path} was replaced {READ_TRIES} times while it was read; read it again when it is not")


READ_TRIES = 5


def _identity(path: Path) -> tuple[int, ...] | None:
    """What changes when a file is replaced (os.replace gives the path a new inode) or rewritten."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
OPTIMISER_SLOTS = ("step", "exp_avg", "exp_avg_sq")  # AdamW's state of each parameter
PRECISION_STATE = ("scale", "growth_tracker", "skipped_in_a_row")
RNG_STATES = ("cpu", "cuda", "mps")
GROUP_NUMBERS = ("lr", "eps", "weight_decay")  # a parameter group's numbers a resumed run takes (and `betas`)


def _check_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Every tensor of a known kind, name, dtype and shape: anyone can recompute the checksum."""
    cpu_size = torch.get_rng_state().numel()
    for name, tensor in tensors.items():
        kind, _, rest = name.partition("/")
        index, _, slot = rest.partition("/")
        if kind not in (*KINDS, "optim"):
            wrong = "is of no kind a checkpoint holds"
        elif kind == "optim" and not (index.isascii() and index.isdigit() and slot in OPTIMISER_SLOTS):
            wrong = f"is not optim/<parameter number>/<{' or '.join(OPTIMISER_SLOTS)}>"
        elif kind in ("model", "grokfast", "optim") and tensor.dtype not in FLOATS:
            wrong = f"is {tensor.dtype}, not a float"
        elif kind == "rng" and (rest not in RNG_STATES or tensor.dtype != torch.uint8 or tensor.dim() != 1):
            wrong = "is not a random generator's state (rng/cpu, rng/cuda or rng/mps, bytes)"
        elif kind == "rng" and rest == "cpu" and tensor.numel() != cpu_size:
            wrong = f"holds {tensor.numel()} bytes, not the {cpu_size} of this PyTorch's generator state"
        elif kind == "precision" and not (rest in PRECISION_STATE and tensor.numel() == 1):
            wrong = "is not a loss-scaling number"
        else:
            continue
        raise CheckpointError(f"checkpoint {path}: tensor {name!r} {wrong}; the file is not one gpt-train wrote")


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _param_groups(path: Path, text: str) -> list[dict[str, Any]]:
    """The optimiser's parameter groups from the metadata: parameter numbers, GROUP_NUMBERS, `betas` and flags."""
    try:
        groups = json.loads(text)
    except ValueError:
        groups = None
    usable = isinstance(groups, list) and all(
        isinstance(group, dict)
        and isinstance(group.get("params"), list)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in group["params"])
        and all(_finite_number(group.get(key)) for key in GROUP_NUMBERS)
        and isinstance(group.get("betas"), list)
        and len(group["betas"]) == 2
        and all(_finite_number(beta) for beta in group["betas"])
        and all(
            value is None or isinstance(value, bool)
            for key, value in group.items()
            if key not in (*GROUP_NUMBERS, "betas", "params")
        )
        for group in groups
    )
    if not usable:
        raise CheckpointError(f"checkpoint {path} has unreadable metadata (param_groups is not the optimiser's groups)")
    return groups


def _progress(path: Path, meta: dict[str, str]) -> dict[str, Any]:
    """The step, the seconds trained, the step whose evaluation started the cool-down (None before one has), the
    last step's loss (None if not recorded), the number of processes and of CPU threads (None if not recorded)."""
    unreadable = lambda why: CheckpointError(f"checkpoint {path} has unreadable metadata ({why})")
    try:
        step, elapsed = meta["step"], float(meta["elapsed"])
        loss = float(meta["loss"]) if "loss" in meta else None
    except (KeyError, ValueError) as error:
        raise unreadable(error) from None
    cooldown_from, world_size, threads = meta.get("cooldown_from"), meta.get("world_size"), meta.get("threads")
    numbers = (("step", step), ("cooldown_from", cooldown_from), ("world_size", world_size), ("threads", threads))
    for name, number in numbers:
        if number is not None and not (number.isascii() and number.isdigit()):
            raise unreadable(f"{name} {number!r} is not a whole number >= 0")
    if not (math.isfinite(elapsed) and elapsed >= 0):
        raise unreadable(f"elapsed {elapsed!r} is not seconds >= 0")
    if cooldown_from is not None and int(cooldown_from) > int(step):
        raise unreadable(f"cooldown_from {cooldown_from} is after step {step}")
    for name, count in (("world_size", world_size), ("threads", threads)):
        if count is not None and int(count) < 1:
            raise unreadable(f"{name} {count} is not a count of one or more")
    whole = lambda number: None if number is None else int(number)
    return {"step": int(step), "elapsed": elapsed, "cooldown_from": whole(cooldown_from), "loss": loss,
            "world_size": whole(world_size), "threads": whole(threads)}  # fmt: skip


def load_checkpoint(path: Path, task: str) -> TrainingState:
    """Read a checkpoint of a run of `task`, checking its checksum, then every tensor and metadata field."""
    tensors, meta = _opened(path, read_safetensors)
    if "sha256" not in meta or _digest(tensors) != meta["sha256"]:
        raise CheckpointError(f"checkpoint {path} is corrupted (its contents do not match their checksum)")
    if meta.get("task") != task:
        raise CheckpointError(f"checkpoint {path} belongs to a run of task {meta.get('task')!r}, not {task!r}")
    _check_tensors(path, tensors)
    for name, tensor in tensors.items():  # a run stops before a step that would make one so
        if name.startswith("model/") and tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"checkpoint {path}: weight {name.removeprefix('model/')} holds nan or inf")
    progress = _progress(path, meta)
    param_groups = _param_groups(path, meta.get("param_groups", ""))
    parts: dict[str, dict[str, torch.Tensor]] = {kind: {} for kind in KINDS}
    optimizer_state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        kind, _, rest = key.partition("/")
        if kind == "optim":
            index, _, slot = rest.partition("/")
            optimizer_state.setdefault(int(index), {})[slot] = value
        else:
            parts[kind][rest] = value
    optimizer = {"state": optimizer_state, "param_groups": param_groups}
    return TrainingState(task, optimizer=optimizer, **progress, **parts)


def save_snapshot(path: Path, task: str, step: int, weights: dict[str, torch.Tensor]) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
    except OSError as error:
        reason = error.strerror or str(error)
        raise WriteError(f"cannot create {path.parent} ({reason})", reason) from None
    state = TrainingState(task, step, 0.0, weights, {"state": {}, "param_groups": []}, {})
    save_checkpoint(path, state, what="snapshot")


WEIGHT_DTYPES = ("F16", "BF16", "F32", "F64")  # safetensors' names of the float dtypes
HEADER_ERRORS = (SafetensorError, OSError, ValueError)  # what `safetensors_header` raises on an unreadable file


def safetensors_metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as archive:
        return archive.metadata() or {}


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's dtype (F32, BOOL, ...) and shape, from the file's header alone (or one of HEADER_ERRORS)."""
    with safe_open(str(path), framework="pt") as archive:
        slices = {name: archive.get_slice(name) for name in archive.keys()}  # noqa: SIM118 (not a dict)
        return {name: (part.get_dtype(), tuple(part.get_shape())) for name, part in slices.items()}


TRAINING_ONLY = ("dropout", "init_scale")  # model settings that change training, not what trained weights compute


def check_fits_checkpoint(config: GPTConfig, path: Path) -> None:
    """config.json's model against the checkpoint's header, before any model is built: float weights, the layers and
    embedding tables that bound its size (`load_weights` compares every other shape), and the model it was trained
    as (an edited n_head or residual would load and compute something else)."""
    header = _opened(path, safetensors_header)
    weights = {name.removeprefix("model/"): slot for name, slot in header.items() if name[:6] == "model/"}
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
            holds = "no " + name if held is None else f"{name} of shape {held}"
            raise CheckpointError(f"config.json's {key} x n_embd is {wanted}, but checkpoint {path} holds {holds}")
    try:
        trained = dict(json.loads(_opened(path, safetensors_metadata).get("model", "{}")))
    except (ValueError, TypeError):
        raise CheckpointError(f"checkpoint {path} is corrupted (its record of the model is not readable)") from None
    now = asdict(config)
    edited = [key for key in sorted(trained) if key not in TRAINING_ONLY and trained[key] != now.get(key)]
    if edited:
        changes = ", ".join(f"{key}={now.get(key)!r}" for key in edited)
        was = ", ".join(f"{key}={trained[key]!r}" for key in edited)
        raise CheckpointError(f"config.json has {changes}, but checkpoint {path} was trained with {was}")


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy saved weights into `model`, refusing a checkpoint whose parameters do not match it."""
    params = dict(model.named_parameters())
    if set(params) != set(weights):
        raise CheckpointError("checkpoint does not match this run's model (different parameters)")
    with torch.no_grad():
        for name, param in params.items():
            if param.shape != weights[name].shape:
                shapes = f"{tuple(weights[name].shape)} there, {tuple(param.shape)} in the model"
                raise CheckpointError(f"checkpoint does not match this run's model ({name}: {shapes})")
            param.copy_(weights[name])
