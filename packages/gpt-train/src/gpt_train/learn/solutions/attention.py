"""Step 2: scaled dot-product attention, the heart of the transformer.

    scores = q k^T / sqrt(d)          (B, H, Tq, Tk): how much each query attends to each key
    weights = softmax(scores)         over the keys (the last dimension)
    output = weights v                (B, H, Tq, d)

With causal=True a query may not see keys after it. The queries are the LAST Tq positions of the keys
(during cached decoding a single new query attends to every key so far): query i sits at position
Tk - Tq + i and sees keys 0 .. Tk - Tq + i. Masked scores are -inf, so their weight is exp(-inf) = 0.

Check it with `gpt-train learn check attention`: it refuses F.scaled_dot_product_attention and torch.softmax
(write the softmax as in step 1).
"""

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """q: (B, H, Tq, d); k, v: (B, H, Tk, d), Tq <= Tk -> output (B, H, Tq, d).

    Hints: the 1/sqrt(d) scales the scores, before the softmax; torch.ones(Tq, Tk, dtype=torch.bool,
    device=q.device).tril(diagonal) keeps entries on and below a diagonal (diagonal > 0 moves it right);
    scores.masked_fill(~allowed, float("-inf")). Try Tq = 1 on paper.
    """
    # BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, Tq, Tk)
    if causal:
        n_queries, n_keys = scores.shape[-2:]
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=q.device).tril(n_keys - n_queries)
        scores = scores.masked_fill(~allowed, float("-inf"))
    exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return exp / exp.sum(dim=-1, keepdim=True) @ v
    # END SOLUTION
