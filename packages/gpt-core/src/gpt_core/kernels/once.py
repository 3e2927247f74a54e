"""The guard on every hand-written backward: it differentiates once.

A hand-written backward computes the gradient from what its forward saved without a graph (xhat and 1/std, the
softmax's output, a dropout seed), so a gradient of that gradient (create_graph=True: a Hessian-vector product, a
gradient penalty) would miss every term that runs through those quantities, and nothing would say so. PyTorch's
`once_differentiable` does not stop it: its error sits on a node that `torch.autograd.grad(..., inputs)` prunes.
Here the backward refuses to run with a graph to record; the reference set, plain autograd, gives second
derivatives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def differentiates_once(backward: Callable[..., Any]) -> Callable[..., Any]:
    """`backward`, raising RuntimeError when asked to record a graph of itself (create_graph=True)."""

    @functools.wraps(backward)
    def checked(ctx: Any, *grads: Any) -> Any:
        if torch.is_grad_enabled():  # a backward runs with grad mode on only under create_graph=True
            raise RuntimeError(
                f"{backward.__module__}'s backward differentiates once: for second derivatives "
                "(create_graph=True) build the model with kernels=REFERENCE_KERNELS"
            )
        return backward(ctx, *grads)

    return checked
