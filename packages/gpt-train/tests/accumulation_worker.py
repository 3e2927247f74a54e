"""One rank of the gradient-accumulation test under torchrun (test_grad_accum.py), and the model and batch
that test shares with it.

Rank r takes rows 4r..4r+3 of `whole_batch()`, accumulates them in 2 micro-batches through
DistributedDataParallel, and writes its gradients and, for every all-reduce, which micro-step's
backward ran it.

    python -m torch.distributed.run --standalone --nproc_per_node 2 accumulation_worker.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from gpt_core import GPT, IGNORE_INDEX, GPTConfig
from gpt_tasks import Batch
from gpt_train.accumulation import accumulate_gradients
from gpt_train.distributed import Rank
from gpt_train.precision import Precision

SCORED_PER_ROW = (8, 1, 3, 0, 5, 2, 4, 1)
"""How many leading positions of each of the 8 rows are scored. As micro-batches of 2 rows they score
9, 3, 7 and 5 targets: unequal, so a plain mean of micro-batch means would be wrong. As the two ranks'
halves they score 12 each, so the mean of the ranks' means (what DDP's average gives) is the whole mean."""


def tiny_model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)).double()


def whole_batch(scored_per_row: tuple[int, ...] = SCORED_PER_ROW) -> Batch:
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randint(11, (len(scored_per_row), 8), generator=generator)
    targets = torch.randint(11, (len(scored_per_row), 8), generator=generator)
    for row, scored in enumerate(scored_per_row):
        targets[row, scored:] = IGNORE_INDEX
    return Batch(inputs, targets)


def main(out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ddp = DistributedDataParallel(tiny_model())
    micro_steps_run: list[int] = []  # one entry per forward: its length is the micro-step now running
    synced_on: list[int] = []

    def recording_allreduce(state, bucket):
        synced_on.append(len(micro_steps_run))
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, recording_allreduce)

    def loss_of(inputs, targets, read):
        micro_steps_run.append(1)
        return ddp(inputs, targets, read=read).loss

    whole = whole_batch()
    mine = Batch(whole.inputs[4 * rank : 4 * rank + 4], whole.targets[4 * rank : 4 * rank + 4])
    cpu = torch.device("cpu")
    accumulate_gradients(loss_of, mine, 2, Precision("fp32", cpu), cpu, ddp.no_sync)
    grads = {name: p.grad for name, p in ddp.module.named_parameters()}
    torch.save({"grads": grads, "synced_on": synced_on}, out_dir / f"rank{rank}.pt")
    Rank(rank, rank, 2).barrier()  # both ranks done, the last collective kept by the main thread (see LAST_BARRIER)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
