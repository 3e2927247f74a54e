"""Step 3: LayerNorm, which keeps every position's features on one scale.

    mean = sum_c x_c / C,   var = sum_c (x_c - mean)^2 / C     (the biased variance: divide by C)
    y = (x - mean) / sqrt(var + eps) * weight + bias           over the last dimension

eps sits under the square root, so a constant row gives 0, not 0/0.

Check it with `gpt-train learn check layer_norm`: it refuses F.layer_norm and nn.LayerNorm, and tries an eps other
than 1e-5: use the one passed in.
"""

import torch


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: (..., C); weight, bias: (C,) (bias may be None: add nothing) -> (..., C).

    Hints: keepdim=True on every reduction; x.var() divides by C - 1 unless told unbiased=False.
    """
    # BEGIN SOLUTION
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).square().mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps) * weight
    return y if bias is None else y + bias
    # END SOLUTION
