"""The model step's answer, and with the kernel steps' answers a whole minimal GPT: token and position embeddings,
pre-norm blocks, a final norm, the head tied to the token embedding, the loss over the scored targets.

Its parameters carry gpt-core's names, so gpt-core's weights load into it as they are; a test pins it to
`gpt_core.GPT` (logits, loss and every gradient within 1e-12 in float64). `kernels` holds the functions of the
kernel steps: kernels.attention(q, k, v, causal), kernels.layer_norm(x, weight, bias, eps), kernels.gelu(x) and
kernels.cross_entropy(logits, targets).
"""

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, kernel):
        super().__init__()
        self.weight, self.bias, self.kernel = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim)), kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x, self.weight, self.bias, 1e-5)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, attention):
        super().__init__()
        self.n_head, self.attention = n_head, attention
        self.qkv = nn.Linear(n_embd, 3 * n_embd)  # q, k and v of every head in one product
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)  # (B, H, T, d)
        y = self.attention(q, k, v, True)  # (B, H, T, d)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # heads side by side again: (B, T, C)


class MLP(nn.Module):
    def __init__(self, n_embd: int, gelu):
        super().__init__()
        self.fc, self.gelu, self.proj = nn.Linear(n_embd, 4 * n_embd), gelu, nn.Linear(4 * n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, kernels):
        super().__init__()
        self.ln1 = LayerNorm(n_embd, kernels.layer_norm)
        self.attn = MultiHeadAttention(n_embd, n_head, kernels.attention)
        self.ln2 = LayerNorm(n_embd, kernels.layer_norm)
        self.mlp = MLP(n_embd, kernels.gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))  # the residual stream x is added to, never normalised itself
        return x + self.mlp(self.ln2(x))


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
