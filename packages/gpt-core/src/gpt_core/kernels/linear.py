"""The two one-operation pieces, Linear's product and Embedding's lookup, and the rows a forward reads.

    linear(x, W, b) = x W^T + b        embedding(ids, W) = W[ids]

Neither needs a hand-written backward: each is one tensor operation, so neither is a slot of the
kernel table. What is here is the route each takes:
 - a product over the flattened leading dimensions is one fused multiply-add (addmm);
 - the lookup is `index_select`, whose backward is an index_add, instead of `W[ids]`, whose backward
   is the accumulating index_put behind advanced indexing, a much slower route on CPU for the same
   gradient (`benchmarks/kernels.py` times both);
 - the rows a forward reads (`read_rows`) are taken by `index_select` too.
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
    """The vectors of `x` (B, T, C) at the True positions of `read` (B, T) -> (N, C), in row-major order:
    `x[read]`, by `index_select`, whose backward is an index_add, not advanced indexing's index_put; when
    every position is read (a language model's loss), the flattened `x` itself, with no copy (not under
    torch.compile, where that test would branch on the data and break the graph)."""
    flat = x.reshape(-1, x.shape[-1])  # (B * T, C)
    if not torch.compiler.is_compiling() and bool(read.all()):
        return flat
    return flat.index_select(0, read.reshape(-1).nonzero().squeeze(1))


def first_read_position(read: Tensor) -> int:
    """The first position that any row of `read` (B, T) reads (0 when none does): the last block needs
    queries, its MLP and the head only from there on, the positions before it serving only as keys.
    Under torch.compile, 0: a start read off the data would make the graph's shapes depend on it (a sync
    and a graph break), and asking from every position gives the same read rows."""
    if torch.compiler.is_compiling():
        return 0
    return int(read.any(dim=0).int().argmax())
