"""The cross_entropy step's answer: log-sum-exp with the max shift, minus the target's logit, over scored rows."""

import torch


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits: (N, V); targets: (N,), -100 for a row not scored -> the mean loss over the scored rows."""
    scored = targets != -100
    logits, targets = logits[scored], targets[scored]  # (n, V), (n,)
    m = logits.amax(dim=-1, keepdim=True)
    logsumexp = m + (logits - m).exp().sum(dim=-1, keepdim=True).log()  # (n, 1)
    return (logsumexp - logits.gather(-1, targets[:, None])).mean()
