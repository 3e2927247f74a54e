"""Runs under torchrun: one process per rank, DistributedDataParallel, gloo on CPU and nccl on CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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
        if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), int(os.environ["WORLD_SIZE"]))

    def device_for(self, device: torch.device) -> torch.device:
        """Under torchrun each rank takes its own GPU (cuda:LOCAL_RANK)."""
        if self.distributed and device.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return device

    def init(self, device: torch.device) -> None:
        if self.distributed and not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")

    def shutdown(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def mean_and_any(self, value: float, flag: bool, device: torch.device) -> tuple[float, bool]:
        """The mean of `value` and the logical OR of `flag` over every rank (one all-reduce)."""
        if not self.distributed:
            return value, flag
        packed = torch.tensor([value, float(flag)], dtype=torch.float64, device=device)
        dist.all_reduce(packed)
        return packed[0].item() / self.world_size, packed[1].item() > 0

    def gather_floats(self, value: float, device: torch.device) -> list[float]:
        if not self.distributed:
            return [value]
        mine = torch.tensor([value], dtype=torch.float64, device=device)
        every = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(every, mine)
        return [t.item() for t in every]
