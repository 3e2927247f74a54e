"""Runs under torchrun: one process per rank, DistributedDataParallel, gloo on CPU and nccl on CUDA."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from gpt_core import to_device
from gpt_train.errors import TrainError, message_of

LAUNCH = ("RANK", "LOCAL_RANK", "WORLD_SIZE")  # what torchrun sets for each process
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")  # where the processes meet; init_process_group needs both
T = TypeVar("T")
LARGEST = 2**31 - 1  # the largest rank or world size PyTorch's process group takes (a C int)
LAST_BARRIER: list[dist.Work] = []
"""The last barrier's work. gloo's barrier holds the collectives issued before it, and so their tensors: a gloo thread
dropping the last reference while Python shuts down (a rank exiting just after its last barrier) would need the GIL
then and abort the process. The main thread keeps it instead, and releases it."""


class DistributedError(TrainError):
    """torchrun's variables left in the environment, or set to what torchrun never sets; another rank lost."""


PEER_WORDS = ("remote process", "connection", "timed out", "timeout")  # in a backend's error on losing another rank


def lost_a_rank(error: BaseException) -> DistributedError | None:
    """The one line for a collective's error on losing another rank (its process died, or the connection to it
    broke), whose own error says why; None for any other error. gloo raises a RuntimeError from its transport, the
    store and the network a DistStoreError or DistNetworkError; NCCL's DistBackendError counts only where it names a
    peer, a connection or a timeout (not this rank's own CUDA error, which a collective can be the first to meet)."""
    said = str(error)
    lost = (
        isinstance(error, (dist.DistNetworkError, dist.DistStoreError))
        or (isinstance(error, dist.DistBackendError) and any(word in said.lower() for word in PEER_WORDS))
        or (isinstance(error, RuntimeError) and "gloo/transport" in said)
    )
    if not lost:
        return None
    said = said.strip().splitlines()[0][:200] if said.strip() else type(error).__name__
    return DistributedError(f"another rank stopped, or the connection to it broke ({said}); see that rank's error")


class Unread:
    """A device tensor's values on their way to the host. On CUDA they are copied into pinned memory behind the work
    queued so far, and an event marks the copy: reading them waits for that work alone, not for what was queued
    after it (`tolist` on the tensor would wait for the whole queue). Elsewhere the tensor is read as it is."""

    def __init__(self, value: torch.Tensor):
        self.value, self.copied = value, None
        if value.device.type == "cuda":
            self.value = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            self.value.copy_(value, non_blocking=True)
            self.copied = torch.cuda.Event()
            self.copied.record(torch.cuda.current_stream(value.device))  # the copy's stream: the source GPU's

    def read(self) -> Any:
        if self.copied is not None:
            self.copied.synchronize()
        return self.value.tolist()


@dataclass(frozen=True)
class Rank:
    """This process's place in the run (rank 0 of 1 when not launched by torchrun)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls) -> Rank:
        """This process's rank as torchrun's variables say, refusing values torchrun never sets."""
        given = {name: os.environ[name] for name in LAUNCH if name in os.environ}
        for name, value in given.items():
            least = 1 if name == "WORLD_SIZE" else 0
            if not re.fullmatch(r"\s*[0-9]+\s*", value) or int(value) < least:
                problem = f"not what torchrun sets (a whole number, {least} or more)"
            elif int(value) > LARGEST:
                problem = f"past what torchrun sets (at most {LARGEST:,})"
            else:
                continue
            raise DistributedError(f"{name}={value!r} is {problem}: start with torchrun, or unset {name}")
        rank, world_size = int(given.get("RANK", "0")), int(given.get("WORLD_SIZE", "1"))
        if "RANK" not in given or world_size <= 1:
            return cls()
        if rank >= world_size:
            raise DistributedError(
                f"RANK={rank} is not below WORLD_SIZE={world_size}: start with torchrun, or unset them"
            )
        missing = " and ".join(name for name in RENDEZVOUS if not os.environ.get(name))
        if missing:
            raise DistributedError(
                f"RANK={rank} and WORLD_SIZE={world_size} are set but {missing} not: start with torchrun, or unset "
                f"{', '.join(given)}"
            )
        port = os.environ["MASTER_PORT"]
        if not re.fullmatch(r"\s*[0-9]+\s*", port) or not 1 <= int(port) <= 65535:
            raise DistributedError(
                f"MASTER_PORT={port!r} is not what torchrun sets (a port, 1 to 65535): start with torchrun, or unset "
                f"{', '.join([*given, *RENDEZVOUS])}"
            )
        return cls(rank, int(given.get("LOCAL_RANK", "0")), world_size)

    def device_for(self, device: torch.device) -> torch.device:
        if self.distributed and device.type == "mps":  # gloo and nccl carry CPU and CUDA tensors only
            raise DistributedError("torchrun runs on cpu (gloo) or cuda (nccl), not mps; give --device cpu")
        if self.distributed and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    def init(self, device: torch.device) -> None:
        if self.distributed and not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")

    def on_main(self, work: Callable[[], T], device: torch.device) -> T | None:
        """`work()` on rank 0 alone (laying out and locking the run directory, which it alone writes), with every
        rank in the process group waiting for its verdict: rank 0's error ends each rank at once, rank 0 with that
        error and the others with one line naming it, none left waiting for a rank 0 that has exited. Returns
        `work()` on rank 0, None on the others."""
        if not self.distributed:
            return work()
        self.init(device)
        result, refusal = None, None
        if self.is_main:
            try:
                result = work()
            except BaseException as error:  # Ctrl-C included: the others must not wait for a verdict never sent
                refusal = error
        verdict = [None if refusal is None else message_of(refusal) or type(refusal).__name__]
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] is not None:
            self.shutdown()
            if refusal is not None:
                raise refusal
            raise DistributedError(f"rank 0 stopped before training: {verdict[0]}")
        return result

    def shutdown(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()

    def barrier(self) -> None:
        if self.distributed:
            work = dist.barrier(async_op=True)
            work.wait()
            LAST_BARRIER[:] = [work]

    def reduced(self, value: float | torch.Tensor, flag: bool, device: torch.device) -> Unread:
        """`value` (a number, or a scalar tensor on `device`) summed over the ranks, beside how many ranks set `flag`,
        on its way to the host (`read` gives them). A lone process: `value` alone."""
        if not self.distributed:
            return Unread(torch.as_tensor(value).detach())
        parts = (torch.as_tensor(value, dtype=torch.float64), torch.tensor(float(flag), dtype=torch.float64))
        packed = torch.stack([to_device(part.detach(), device) for part in parts])
        dist.all_reduce(packed)
        return Unread(packed)

    def read(self, reduced: list[Unread]) -> list[tuple[float, bool]]:
        """`reduced` values read: each one's mean over the ranks and whether any rank set its flag (a lone process:
        the value, False)."""
        rows = [unread.read() for unread in reduced]
        if not self.distributed:
            return [(value, False) for value in rows]
        return [(total / self.world_size, flagged > 0) for total, flagged in rows]

    def mean_and_any(self, value: float | torch.Tensor, flag: bool, device: torch.device) -> tuple[float, bool]:
        """The mean of `value` over the ranks and whether any rank's `flag` is set, read at once."""
        if not self.distributed:
            return float(value), flag
        return self.read([self.reduced(value, flag, device)])[0]

    def gather_floats(self, value: float, device: torch.device) -> list[float]:
        if not self.distributed:
            return [value]
        mine = torch.tensor([value], dtype=torch.float64, device=device)
        every = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine)
        return [t.item() for t in every]
