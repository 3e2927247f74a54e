"""Step 6: LayerNorm with a backward you derive yourself (the way gpt-core's own kernel is written).

Autograd keeps every intermediate of the forward and replays one operation at a time; the gradient in
closed form needs only xhat and 1/std. With xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), and
g = dy * weight (the gradient reaching xhat):

    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))       means over the last dimension
    dweight = sum of dy * xhat over every row,   dbias = sum of dy over every row

(derive it: xhat depends on x directly, through the mean, and through the variance: one term each).

Your backward computes from xhat and 1/std, saved without a graph, so it differentiates once: a second
derivative through it (create_graph=True) misses every term through them. gpt-core's own kernel raises there
instead (gpt_core/kernels/once.py).

Check it with `gpt-train learn check layer_norm_backward`: the check refuses a gradient autograd derived,
including autograd called inside your backward (torch.autograd.grad, .backward(), torch.func).
"""

import torch


class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        """Compute y as in step 3 and ctx.save_for_backward(...) what backward needs."""
        # BEGIN SOLUTION
        centred = x - x.mean(dim=-1, keepdim=True)
        rstd = (centred.square().mean(dim=-1, keepdim=True) + eps).rsqrt()  # 1 / sqrt(var + eps), (..., 1)
        xhat = centred * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.has_bias = bias is not None
        y = xhat * weight
        return y + bias if bias is not None else y
        # END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        """dy: (..., C) -> (dx, dweight, dbias, None): one gradient per input of forward (None for eps, and
        for a bias that was None)."""
        # BEGIN SOLUTION
        xhat, rstd, weight = ctx.saved_tensors
        g = dy * weight  # the gradient reaching xhat
        dx = rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
        rows = (-1, dy.shape[-1])  # the parameters' gradients sum over every row
        dweight = (dy * xhat).reshape(rows).sum(dim=0)
        dbias = dy.reshape(rows).sum(dim=0) if ctx.has_bias else None
        return dx, dweight, dbias, None
        # END SOLUTION


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x: (..., C); weight, bias: (C,) or bias None -> (..., C), with your backward."""
    return LayerNorm.apply(x, weight, bias, eps)
