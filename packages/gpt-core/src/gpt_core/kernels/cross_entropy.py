"""Cross-entropy of logits against integer targets, with a hand-derived backward.

    loss = mean over the scored rows n of  logsumexp(logits_n) - logits_n[target_n]

Rows whose target is IGNORE_INDEX are not scored. The gradient, softmax(logits) - onehot(target) over the number
of scored rows, is rebuilt from the logits and the saved log-sum-exp instead of autograd keeping the softmax.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gpt_core.kernels.once import differentiates_once
from gpt_core.reference import IGNORE_INDEX, upcast


class _CrossEntropy(torch.autograd.Function):
    """Backward: (softmax(logits) - onehot(target)) / n_scored on scored rows, zero elsewhere (everywhere when no row
    is scored, as PyTorch's). 16-bit logits: the loss is float32 (as PyTorch's under autocast), the gradient in the
    logits' dtype."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, ignore_index: int) -> Tensor:
        wide = upcast(logits)
        scored = targets != ignore_index
        safe_targets = torch.where(scored, targets, 0)
        row_max = wide.amax(dim=-1, keepdim=True)
        lse = row_max + (wide - row_max).exp().sum(dim=-1, keepdim=True).log()  # (N, 1)
        picked = wide.gather(-1, safe_targets.unsqueeze(-1))  # (N, 1)
        n_scored = scored.sum()
        loss = torch.where(scored, (lse - picked).squeeze(-1), 0).sum() / n_scored  # an ignored row of -inf: 0
        ctx.save_for_backward(logits, lse, safe_targets, scored, n_scored)  # 16-bit logits kept as given
        return loss

    @staticmethod
    @differentiates_once
    def backward(ctx, dloss: Tensor):
        logits, lse, safe_targets, scored, n_scored = ctx.saved_tensors
        grad = (upcast(logits) - lse).exp_()
        grad.scatter_add_(-1, safe_targets.unsqueeze(-1), torch.full_like(lse, -1.0))
        grad.mul_((dloss / n_scored.clamp(min=1)).to(grad.dtype))  # none scored: no row is left unmasked below
        grad.masked_fill_(~scored.unsqueeze(-1), 0)  # ignored rows: zero, even one of -inf logits (nan above)
        return grad.to(logits.dtype), None, None


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """Mean cross-entropy of `logits` (..., V) against `targets` (...), `ignore_index` unscored; with no scored row
    the mean is 0/0 = nan, as in PyTorch."""
    vocab = logits.shape[-1]
    return _CrossEntropy.apply(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index)
