"""The parameterised building blocks: Linear, Embedding, LayerNorm, GELU, MLP."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from gpt_core.functional import dropout, gelu, layer_norm

_MATVEC_SPLIT_MIN_WEIGHTS = 1 << 16
"""Weights (elements) from which a one-row product on CPU runs as two half products; see `_matvec_in_halves`."""


def _matvec_in_halves(row: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """row (1, in) @ weight^T + bias as one batched product over the two halves of the weight's rows.

    The same dot products, by a faster route on CPU. PyTorch hands a one-row product to MKL's
    matrix-vector kernel, which streams the weight from memory on one core; a batch of two
    half-size products takes the batched-matmul path, which streamed the 6-layer model's 42 MB of
    weights 2-3x faster here (`benchmarks/kernels.py`). This is what a KV-cached decoding step at
    batch 1 spends most of its time on. Below ~64K weights the matrix sits in cache and the
    extra batching costs more than it saves.
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


class Linear(nn.Module):
    """y = x W^T + b, as one fused multiply-add (addmm) over the flattened leading dimensions
    (a single row on CPU goes through `_matvec_in_halves`)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)  # (N, in)
        if _is_large_cpu_matvec(flat, self.weight):
            out = _matvec_in_halves(flat, self.weight, self.bias)
        elif self.bias is None:
            out = flat @ self.weight.t()
        else:
            out = torch.addmm(self.bias, flat, self.weight.t())  # (N, out)
        return out.view(*x.shape[:-1], self.out_features)


class Embedding(nn.Module):
    """A lookup table: row i of the weight is the vector for id i.

    index_select rather than weight[ids]: its backward is an index_add, which measured ~8x faster on
    CPU than the accumulating index_put behind advanced indexing, for the same gradient.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, ids: Tensor) -> Tensor:
        rows = self.weight.index_select(0, ids.reshape(-1))  # (N, D)
        return rows.view(*ids.shape, self.weight.shape[1])  # (*ids.shape, D)


class LayerNorm(nn.Module):
    """Normalise the last dimension to zero mean and unit variance, then scale and shift.

    `kernel` does the arithmetic (the `layer_norm` slot of `gpt_core.Kernels`).
    """

    def __init__(
        self,
        dim: int,
        bias: bool = True,
        eps: float = 1e-5,
        kernel: Callable[[Tensor, Tensor, Tensor | None, float], Tensor] = layer_norm,
    ):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
        self.kernel = kernel

    def forward(self, x: Tensor) -> Tensor:
        return self.kernel(x, self.weight, self.bias, self.eps)


class GELU(nn.Module):
    """The tanh-approximated GELU non-linearity (no parameters), computed by `kernel` (the `gelu` slot)."""

    def __init__(self, kernel: Callable[[Tensor], Tensor] = gelu):
        super().__init__()
        self.kernel = kernel

    def forward(self, x: Tensor) -> Tensor:
        return self.kernel(x)


class MLP(nn.Module):
    """Position-wise feed-forward: expand 4x, GELU (computed by `gelu`), project back."""

    def __init__(self, n_embd: int, bias: bool, dropout_p: float, gelu: Callable[[Tensor], Tensor] = gelu):
        super().__init__()
        self.fc = Linear(n_embd, 4 * n_embd, bias=bias)
        self.act = GELU(gelu)
        self.proj = Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout_p = dropout_p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(self.proj(self.act(self.fc(x))), self.dropout_p, self.training)
