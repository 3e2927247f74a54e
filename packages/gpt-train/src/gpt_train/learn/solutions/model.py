"""The model step's answer, and with the answers before it a whole minimal GPT: token and position embeddings,
the pre-norm blocks of block.py, a final norm, the head tied to the token embedding, the loss over the scored targets.

Its parameters carry gpt-core's names, so gpt-core's weights load into it as they are; a test pins it to
`gpt_core.GPT` (logits, loss and every gradient within 1e-12 in float64). `kernels` holds the functions of the
kernel steps: kernels.attention(q, k, v, causal), kernels.layer_norm(x, weight, bias, eps), kernels.gelu(x) and
kernels.cross_entropy(logits, targets).
"""

import torch
from block import Block, LayerNorm
from torch import nn


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, kernels):
        super().__init__()
        self.cross_entropy = kernels.cross_entropy
        self.wte = nn.Embedding(vocab_size, n_embd)  # a vector per token
        self.wpe = nn.Embedding(block_size, n_embd)  # a vector per position
        self.blocks = nn.ModuleList(Block(n_embd, n_head, kernels) for _ in range(n_layer))
        self.ln_f = LayerNorm(n_embd, kernels.layer_norm)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix reads tokens in and writes them out

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) token ids -> (logits (B, T, V), the mean loss over targets (B, T) not -100, or None)."""
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))  # (B, T, C); positions 0 .. T-1
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, self.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
