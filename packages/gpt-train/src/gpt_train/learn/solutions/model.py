"""Step 11: the whole GPT, from token ids to logits and the loss.

    x = wte(idx) + wpe(positions)        (B, T, C): a vector per token plus a vector per position, 0 .. T-1
    x = block(x), for each block         (B, T, C)
    logits = lm_head(ln_f(x))            (B, T, V): the final norm, then the head
    loss = cross_entropy(logits, targets)  over (B*T, V) and (B*T,): the mean over targets that are not -100

The head is tied to the token embedding (GPT-2's): one (V, C) matrix reads a token in and scores every token out,
so lm_head.weight IS wte.weight, not a copy. Your Block and LayerNorm come from block.py, step 10's file beside
this one. The parameters carry gpt-core's names (wte, wpe, blocks.0.ln1 ..., ln_f, lm_head): the check copies
gpt_core.GPT's weights into yours and compares the logits, the loss and every gradient in float64; called with
targets=None (as `learn train`'s evaluation calls it), your GPT returns (logits, None).

Check it with `gpt-train learn check model`: it hands your model `kernels`, with kernels.attention,
kernels.layer_norm, kernels.gelu and kernels.cross_entropy(logits, targets) (your kernel steps' signatures).
"""

import torch
from block import Block, LayerNorm  # yours, from step 10
from torch import nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, kernels):
        super().__init__()
        self.cross_entropy = kernels.cross_entropy
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, kernels) for _ in range(n_layer))
        self.ln_f = LayerNorm(n_embd, kernels.layer_norm)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)  # to be tied to wte (see above): one line
        self.lm_head.weight = self.wte.weight  # solution only: tied, one matrix reads tokens in and writes them out

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx: (B, T) token ids; targets: (B, T) or None -> (logits (B, T, V), the loss or None).

        Hints: torch.arange(T, device=idx.device) are the positions; logits.reshape(-1, V) and targets.reshape(-1)
        are what cross_entropy takes.
        """
        # BEGIN SOLUTION
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))  # (B, T, C); positions 0 .. T-1
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, self.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        # END SOLUTION
