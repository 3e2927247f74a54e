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


def read_rows(x: Tensor, read: Tensor) -> Tensor:
    """`x[read]` (N, C) by `index_select`; when every position is read, the flattened `x` itself (eager only)."""
    flat = x.reshape(-1, x.shape[-1])  # (B * T, C)
    if not torch.compiler.is_compiling() and bool(read.all()):
        return flat
    return flat.index_select(0, read.reshape(-1).nonzero().squeeze(1))


def first_read_position(read: Tensor) -> int:
    """The first position any row of `read` reads (0 when none does; 0 under torch.compile)."""
    if torch.compiler.is_compiling():
        return 0
    return int(read.any(dim=0).int().argmax())
