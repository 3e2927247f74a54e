"""Step 6: LayerNorm with a backward you derive yourself (the way gpt-core's own kernel is written).

Autograd keeps every intermediate of the forward and replays one operation at a time; the gradient in
closed form needs only xhat and 1/std. With xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), and
g = dy * weight (the gradient reaching xhat):

    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))       means over the last dimension
    dweight = sum of dy * xhat over every row,   dbias = sum of dy over every row

(derive it: xhat depends on x directly, through the mean, and through the variance: one term each).

Check it with `gpt-train learn check layer_norm_backward`: the check refuses a gradient autograd derived,
including autograd called inside your backward (torch.autograd.grad, .backward(), torch.func).
"""

import torch


class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        """Compute y as in step 3 and ctx.save_for_backward(...) what backward needs."""
        raise NotImplementedError

    @staticmethod
    def backward(ctx, dy):
        """dy: (..., C) -> (dx, dweight, dbias, None): one gradient per input of forward (None for eps, and
        for a bias that was None)."""
        raise NotImplementedError


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: (..., C); weight, bias: (C,) or bias None -> (..., C), with your backward."""
    return LayerNorm.apply(x, weight, bias, eps)
