"""Step 5: the cross-entropy loss the model is trained on.

    loss_n = logsumexp(logits_n) - logits_n[targets_n]        for each row n
    loss = mean of loss_n over the rows whose target is not -100

logsumexp(x) = m + log(sum exp(x - m)), m = max(x), so large logits cannot overflow. A target of -100
(IGNORE_INDEX) marks a position the task does not score, such as the prompt: leave it out of the sum and
out of the count.

Check it with `gpt-train learn check cross_entropy`: it refuses F.cross_entropy, F.nll_loss and log_softmax,
and tries logits x 1000, where a logsumexp without the max shift is inf.
"""

import torch


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits: (N, V) floats; targets: (N,) integers in 0 .. V-1 or -100 -> a scalar.

    Hints: scored = targets != -100; logits[scored] keeps those rows (targets.clamp(min=0) would score them
    as class 0); x.gather(-1, t.unsqueeze(-1)) picks one entry per row.
    """
    # BEGIN SOLUTION
    scored = targets != -100
    logits, targets = logits[scored], targets[scored]  # (n, V), (n,)
    m = logits.amax(dim=-1, keepdim=True)
    logsumexp = m + (logits - m).exp().sum(dim=-1, keepdim=True).log()  # (n, 1)
    return (logsumexp - logits.gather(-1, targets[:, None])).mean()
    # END SOLUTION
