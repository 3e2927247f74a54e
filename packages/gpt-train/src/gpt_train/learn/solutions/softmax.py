"""Step 1: softmax, the function a language model samples its next token from.

    softmax(x)_i = exp(x_i) / sum_j exp(x_j)        over the last dimension

exp(1000) is inf in float64, so subtract each row's max first: softmax(x) = softmax(x - max(x)), exactly,
and now the largest exponent is exp(0) = 1.

Check it with `gpt-train learn check softmax`: it refuses PyTorch's own softmax (torch.softmax, F.softmax,
x.softmax, log_softmax) and gpt-core's, and tries logits x 1000, the (B, V) logits generation samples from, and
float32 inputs, whose dtype the output keeps.
"""

import torch


def softmax(x: torch.Tensor) -> torch.Tensor:
    """x: (..., V) logits -> (..., V) probabilities, each row summing to 1.

    Hints: x.amax(dim=-1, keepdim=True) keeps the dimension so it broadcasts back over the row;
    .exp() and .sum(dim=-1, keepdim=True) do the rest. Autograd derives the backward.
    """
    # BEGIN SOLUTION
    exp = (x - x.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True)
    # END SOLUTION
