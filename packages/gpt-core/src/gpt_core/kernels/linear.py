"""The two one-operation pieces, Linear's product and Embedding's lookup, by their fast routes.

    linear(x, W, b) = x W^T + b        embedding(ids, W) = W[ids]

Neither needs a hand-written backward: each is one tensor operation, so neither is a slot of the
kernel table. What is here is the route each takes:
 - a product over the flattened leading dimensions is one fused multiply-add (addmm), one call into
   MKL; a single row (a KV-cached decoding step at batch 1) on an AMD CPU is instead one batched
   product over the weight's two halves of rows, which there streams the weight faster than MKL's
   matrix-vector kernel (on Intel's, slower);
 - the lookup is `index_select`, whose backward is an index_add, instead of `W[ids]`, whose backward
   is the accumulating index_put behind advanced indexing, a much slower route on CPU for the same
   gradient.
`benchmarks/kernels.py` times each route against the other.
"""

from __future__ import annotations

import functools
import platform

import torch
from torch import Tensor

HALVES_MIN_ENTRIES = 1 << 16
"""Smaller weights stay one addmm on every CPU: there the call's own cost outweighs how fast it streams."""


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) @ weight^T (in, out) + bias (out,) -> (..., out)."""
    flat = x.reshape(-1, weight.shape[1])  # (N, in)
    compiling = torch.compiler.is_compiling()  # one graph for any number of rows: no route by the row count
    by_halves = not compiling and flat.shape[0] == 1 and halves_fit(weight) and one_row_products_by_halves()
    out = one_row_by_halves(flat, weight, bias) if by_halves else rows_by_addmm(flat, weight, bias)  # (N, out)
    return out.view(*x.shape[:-1], weight.shape[0])


def rows_by_addmm(flat: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """flat (N, in) @ weight^T + bias in one call -> (N, out)."""
    return flat @ weight.t() if bias is None else torch.addmm(bias, flat, weight.t())


def one_row_by_halves(row: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """row (1, in) @ weight^T + bias as one batched product over the two halves of weight's rows -> (1, out)."""
    halves = weight.view(2, weight.shape[0] // 2, weight.shape[1])  # (2, out/2, in)
    column = row.t().expand(2, weight.shape[1], 1)  # (2, in, 1), no copy
    out = torch.bmm(halves, column) if bias is None else torch.baddbmm(bias.view(2, -1, 1), halves, column)
    return out.view(1, weight.shape[0])


def halves_fit(weight: Tensor) -> bool:
    """Whether `weight` can take the two-halves route: on the CPU, contiguous, an even number of rows, and
    large enough to gain by it."""
    large, even = weight.numel() >= HALVES_MIN_ENTRIES, weight.shape[0] % 2 == 0
    return weight.is_cpu and large and even and weight.is_contiguous()


@functools.cache
def one_row_products_by_halves() -> bool:
    """True on an AMD CPU with PyTorch's MKL: there MKL's matrix-vector kernel streams a weight more slowly
    than its batched product does, and the reverse on Intel's (`benchmarks/kernels.py` times both routes)."""
    return torch.backends.mkl.is_available() and "AuthenticAMD" in cpu_vendor()


def cpu_vendor() -> str:
    """The CPU's vendor string (GenuineIntel, AuthenticAMD) where the system says it, else ''."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:  # Linux
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor()  # Windows: "AMD64 Family 25 Model 17 Stepping 1, AuthenticAMD"; elsewhere ''


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
