"""The softmax step's answer: the row max subtracted first, so that exp cannot overflow."""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    """x: (..., V) logits -> (..., V) probabilities over the last dimension."""
    exp = (x - x.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True)
