"""An evaluation on a GPU reads the device's numbers a fixed few times per split, not once per chunk: every read
makes the host wait until the GPU's queue is empty, and sort's held-out split is about 490 chunks.

The model sits on the meta device, whose tensors hold no values, standing for a GPU: `DeviceReads` answers each
read of a meta tensor's value (an `.item()`, a copy to the host) with zeros and counts it, and a read PyTorch makes
inside a kernel (boolean-mask indexing's `nonzero`) raises. The numbers are meaningless; the count is the point.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpt_core import GPT, GPTConfig
from gpt_tasks import Task
from gpt_tasks.scoring import reporting_progress

aten = torch.ops.aten


class DeviceReads(TorchDispatchMode):
    """Counts the reads of a meta tensor's value back to the host, answering each with zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        source = args[1] if func is aten.copy_.default else args[0]
        if isinstance(source, torch.Tensor) and source.device.type == "meta":
            if func is aten._local_scalar_dense.default:  # .item(), int(t), bool(t)
                self.reads += 1
                return 0
            to_host = kwargs.get("device", source.device).type != "meta"  # .cpu(), .tolist()
            if func is aten._to_copy.default and to_host:
                self.reads += 1
                return torch.zeros(source.shape, dtype=kwargs.get("dtype") or source.dtype, device=kwargs["device"])
            if func is aten.copy_.default and args[0].device.type != "meta":
                self.reads += 1
                return args[0].zero_()
        return func(*args, **kwargs)


def reads_and_chunks(task: Task, limit: int) -> tuple[int, int]:
    """The device reads of one held-out evaluation of `limit` examples on the meta device, and its chunks."""
    config = GPTConfig(vocab_size=task.vocab_size, block_size=task.block_size, n_layer=1, n_head=2, n_embd=16)
    with torch.device("meta"):
        model = GPT(config)
    chunks = []
    with reporting_progress(lambda split, done, total: chunks.append(done)), DeviceReads() as counted:
        task.evaluate(model, "heldout", "meta", limit)
    return counted.reads, sum(done > 0 for done in chunks)  # a report of 0 done is a scoring pass's start


@pytest.mark.parametrize("name", ["addition", "modadd", "repeats", "shakespeare", "sort", "text"])
def test_an_evaluation_reads_the_device_as_often_for_many_chunks_as_for_one(name, builtin_tasks):
    task = next(task for task in builtin_tasks if task.name == name)
    few_reads, few_chunks = reads_and_chunks(task, 4)
    many_reads, many_chunks = reads_and_chunks(task, 5_000)
    assert few_chunks < many_chunks or task.name == "modadd"  # modadd scores 4,096 at a time
    assert few_reads == many_reads <= 4
