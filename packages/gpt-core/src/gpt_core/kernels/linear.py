"""The two one-operation pieces, Linear's product and Embedding's lookup, and the rows a forward reads.

    linear(x, W, b) = x W^T + b        embedding(ids, W) = W[ids]

Each is one tensor operation, so neither is a kernel slot. The product is one addmm; the lookup (and `read_rows`)
is `index_select`, whose backward is an index_add, not advanced indexing's much slower index_put on CPU.
"""

from __future__ import annotations

import torch
from torch import Tensor


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) @ weight^T (in, out) + bias (out,) -> (..., out)."""
    flat = x.reshape(-1, weight.shape[1])  # (N, in)
    out = flat @ weight.t() if bias is None else torch.addmm(bias, flat, weight.t())  # (N, out)
    return out.view(*x.shape[:-1], weight.shape[0])


def embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """The rows of `weight` (V, D) at `ids` (...) -> (..., D)."""
    rows = weight.index_select(0, ids.reshape(-1))  # (N, D)
    return rows.view(*ids.shape, weight.shape[1])


def check_read(read: Tensor, idx: Tensor) -> None:
    """A ValueError unless `read` is a bool mask of idx's shape on idx's device or the CPU (the host, where a GPU
    model's rows are found without waiting for the GPU)."""
    if read.dtype != torch.bool or read.shape != idx.shape or read.device.type not in (idx.device.type, "cpu"):
        raise ValueError(
            f"read must be a bool mask of idx's shape {tuple(idx.shape)} on its device or the CPU, "
            f"got {read.dtype} {tuple(read.shape)} on {read.device}"
        )


def read_rows(x: Tensor, read: Tensor) -> Tensor:
    """`x[read]` (N, ...) of x (B, T, ...) by `index_select`; when every position is read, the flattened `x` itself
    (eager only). A `read` on the host (x on a GPU) is searched there: no wait for the GPU's queue."""
    flat = x.flatten(0, 1)  # (B * T, ...)
    if not torch.compiler.is_compiling() and bool(read.all()):
        return flat
    return flat.index_select(0, to_device(read.reshape(-1).nonzero().squeeze(1), flat.device))


def to_device(t: Tensor, device: torch.device) -> Tensor:
    """`t` on `device`. From the host to a CUDA GPU through pinned memory, queued behind the GPU's work: the host
    goes on launching kernels, where a copy from ordinary memory would wait for the GPU's queue to empty."""
    if t.device == device:
        return t
    if t.device.type == "cpu" and device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)  # torch keeps the pinned block until the copy is done
    return t.to(device)


def first_read_position(read: Tensor) -> int:
    """The first position any row of `read` reads (0 when none does; 0 under torch.compile)."""
    if torch.compiler.is_compiling():
        return 0
    return int(read.any(dim=0).int().argmax())
