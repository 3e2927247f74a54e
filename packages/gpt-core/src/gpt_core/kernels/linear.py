"""The two one-operation pieces, Linear's product and Embedding's lookup, by their fast routes.

    linear(x, W, b) = x W^T + b        embedding(ids, W) = W[ids]

Neither needs a hand-written backward: each is one tensor operation, so neither is a slot of the
kernel table. What is here is the route each takes:
 - a product over the flattened leading dimensions is one fused multiply-add (addmm);
 - a single row on CPU against a large weight (a KV-cached decoding step at batch 1, which spends
   most of its time here) goes through `_matvec_in_halves`;
 - the lookup is `index_select`, whose backward is an index_add, instead of `W[ids]`, whose backward
   is the accumulating index_put behind advanced indexing, a much slower route on CPU for the same
   gradient.
`benchmarks/kernels.py` times each route against the plain one.
"""

from __future__ import annotations

import torch
from torch import Tensor

_MATVEC_SPLIT_MIN_WEIGHTS = 1 << 16
"""Weights (elements) from which a one-row product on CPU runs as two half products; see `_matvec_in_halves`."""


def _matvec_in_halves(row: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """row (1, in) @ weight^T + bias as one batched product over the two halves of the weight's rows.

    The same dot products, by a faster route on CPU. PyTorch hands a one-row product to MKL's
    matrix-vector kernel, which streams the weight from memory on one core; a batch of two
    half-size products takes the batched-matmul path, which streams it faster. Below
    _MATVEC_SPLIT_MIN_WEIGHTS the matrix sits in cache and the extra batching costs more than it saves.
    """
    out_features, in_features = weight.shape
    halves = weight.view(2, out_features // 2, in_features)  # (2, out/2, in)
    column = row.t().expand(2, in_features, 1)  # (2, in, 1)
    out = torch.bmm(halves, column).view(1, out_features)  # (1, out)
    return out if bias is None else out.add_(bias)


def _is_large_cpu_matvec(flat: Tensor, weight: Tensor) -> bool:
    return (
        flat.shape[0] == 1
        and weight.device.type == "cpu"
        and weight.is_contiguous()
        and weight.shape[0] % 2 == 0
        and weight.numel() >= _MATVEC_SPLIT_MIN_WEIGHTS
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (..., in) @ weight^T (in, out) + bias (out,) -> (..., out)."""
    flat = x.reshape(-1, weight.shape[1])  # (N, in)
    if _is_large_cpu_matvec(flat, weight):
        out = _matvec_in_halves(flat, weight, bias)
    elif bias is None:
        out = flat @ weight.t()
    else:
        out = torch.addmm(bias, flat, weight.t())  # (N, out)
    return out.view(*x.shape[:-1], weight.shape[0])


def embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """The rows of `weight` (V, D) at `ids` (...) -> (..., D)."""
    rows = weight.index_select(0, ids.reshape(-1))  # (N, D)
    return rows.view(*ids.shape, weight.shape[1])


def read_rows(x: Tensor, read: Tensor) -> Tensor:
    """The vectors of `x` (B, T, C) at the True positions of `read` (B, T) -> (N, C), in row-major order:
    `x[read]`, by `index_select`, whose backward is an index_add, not advanced indexing's index_put; when
    every position is read (a language model's loss), the flattened `x` itself, with no copy."""
    flat = x.reshape(-1, x.shape[-1])  # (B * T, C)
    if bool(read.all()):
        return flat
    return flat.index_select(0, read.reshape(-1).nonzero().squeeze(1))


def first_read_position(read: Tensor) -> int:
    """The first position that any row of `read` (B, T) reads (0 when none does): the last block needs
    queries, its MLP and the head only from there on, the positions before it serving only as keys."""
    return int(read.any(dim=0).int().argmax())
