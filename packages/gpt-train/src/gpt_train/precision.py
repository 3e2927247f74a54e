"""Mixed precision: the forward pass under autocast (bf16 or fp16; weights, gradients and optimiser state stay
float32), fp16's loss scaling (its 5 exponent bits flush small gradients to zero), and TF32 on CUDA."""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Iterable, Iterator

import torch

from gpt_train.config import ConfigError
from gpt_train.distributed import Unread
from gpt_train.optimisation import Optimizer

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

MAX_SKIPPED_STEPS = 50  # fp16 steps skipped in a row that mean divergence: the scale went from 2^16 to 2^-34


def check_precision(dtype: str, device: torch.device) -> None:
    if dtype == "fp16" and device.type != "cuda":
        raise ConfigError(
            f"dtype=fp16 needs a CUDA device (its loss scaling is for CUDA's fp16), not {device.type}; "
            "use dtype=bf16 or fp32"
        )
    if dtype == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(f"dtype=bf16 is not supported by {torch.cuda.get_device_name(device)}; use fp16 or fp32")
    if dtype == "bf16" and device.type not in ("cpu", "cuda"):
        raise ConfigError(f"dtype=bf16 runs on cpu and cuda, not {device.type}; use fp32")


@contextlib.contextmanager
def float32_matmuls(precision: str) -> Iterator[None]:
    """Within the block, float32 matrix products at `precision` ("highest", or "high": TF32 on CUDA); the process's
    own setting after it, so a run in a notebook or a test leaves the next computation as it found it."""
    try:
        before = torch.get_float32_matmul_precision()
        restore = functools.partial(torch.set_float32_matmul_precision, before)
    except RuntimeError:  # set by backend (torch.backends.*.fp32_precision), which the global getter refuses to read
        restore = functools.partial(_set_backends, _backends())
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        restore()


_BACKENDS = ("cuda.matmul", "mkldnn.matmul")  # what set_float32_matmul_precision sets


def _backends() -> dict[str, str]:
    """torch.backends' own precision (under the key "") and each backend's as it reads: its own, or the one it
    follows."""
    return {"": torch.backends.fp32_precision} | {
        name: operator.attrgetter(name)(torch.backends).fp32_precision for name in _BACKENDS
    }


def _set_backends(precisions: dict[str, str]) -> None:
    """Give back `_backends()`: a backend that read as torch.backends' own follows it again ("none")."""
    torch.backends.fp32_precision = precisions[""]
    for name in _BACKENDS:
        own = precisions[name]
        operator.attrgetter(name)(torch.backends).fp32_precision = "none" if own == precisions[""] else own


def full_float32() -> contextlib.AbstractContextManager[None]:
    return float32_matmuls("highest")


class Precision:
    """The run's precision around a forward pass, its backward and the optimiser step. fp16's scaling stays on the
    device: the fused optimiser skips a step whose gradients are not finite, and the count of steps skipped in a row
    travels to the host beside the loss, so a step is queued without reading the one before."""

    def __init__(self, dtype: str, device: torch.device, scaler: torch.amp.GradScaler | None = None):
        self.dtype = dtype
        self.device_type = device.type
        self.scaler = scaler
        self.skipped_in_a_row = torch.zeros((), dtype=torch.int64, device=device)

    @classmethod
    def for_run(cls, dtype: str, device: torch.device) -> Precision:
        check_precision(dtype, device)
        scaler = torch.amp.GradScaler(device.type) if dtype == "fp16" else None
        return cls(dtype, device, scaler)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype not in AUTOCAST_DTYPES:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=AUTOCAST_DTYPES[self.dtype])

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: Optimizer, params: Iterable[torch.Tensor]) -> bool | torch.Tensor:
        """Divide fp16's gradients by the scale; whether they are all finite, a boolean on the device (without a
        scaler: True)."""
        if self.scaler is None:
            return True
        self.scaler.unscale_(optimizer)
        finite = [torch.isfinite(p.grad).all() for p in params if p.grad is not None]
        return torch.stack(finite).all() if finite else self.skipped_in_a_row.new_zeros((), dtype=torch.bool)

    def step(self, optimizer: Optimizer, finite: bool | torch.Tensor) -> Unread | None:
        """The optimiser's step (fp16: skipped where the gradients are not finite); fp16's count of steps skipped in
        a row, on its way to the host."""
        if self.scaler is None:
            optimizer.step()
            return None
        self.scaler.step(optimizer)  # a fused optimiser takes the verdict on the device; another reads it
        self.scaler.update()
        self.skipped_in_a_row = torch.where(finite, 0, self.skipped_in_a_row + 1)
        return Unread(self.skipped_in_a_row)

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self.scaler is None:
            return {}
        saved = self.scaler.state_dict()
        numbers = [saved["scale"], saved["_growth_tracker"], int(self.skipped_in_a_row)]
        return dict(zip(("scale", "growth_tracker", "skipped_in_a_row"), map(torch.tensor, numbers), strict=True))

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if (self.scaler is None) != (not state):
            raise ValueError("one of them scales the loss (fp16) and the other does not")
        if self.scaler is None:
            return
        saved = self.scaler.state_dict()
        saved |= {"scale": state["scale"].item(), "_growth_tracker": int(state["growth_tracker"])}
        self.scaler.load_state_dict(saved)
        self.skipped_in_a_row.fill_(int(state["skipped_in_a_row"]))

    @property
    def scale(self) -> float | None:
        return None if self.scaler is None else float(self.scaler.get_scale())
