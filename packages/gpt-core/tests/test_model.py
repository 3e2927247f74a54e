"""The whole GPT against a reference GPT assembled from torch built-ins (nn.Linear, nn.LayerNorm,
nn.Embedding, F.scaled_dot_product_attention, F.gelu, F.cross_entropy) with gpt_core's weights
copied in: logits, loss, attention and every parameter gradient, float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpt_core import GPT, IGNORE_INDEX, GPTConfig, GPTOutput

TOL = 1e-10


# ----------------------------------------------------------------------------- the reference


def _rope_reference(x: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, d): pairs (i, i + d/2) at position m rotated by m * 10000^(-2i/d)."""
    T, d = x.shape[-2:]
    inv_freq = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    theta = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class RefBlock(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.c = c
        self.ln_1 = nn.LayerNorm(c.n_embd, bias=c.bias) if c.layernorm else nn.Identity()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        if c.mlp:
            self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias) if c.layernorm else nn.Identity()
            self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
            self.c_mlp_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        B, T, C = x.shape
        H, d = self.c.n_head, self.c.head_dim
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        if self.c.pos == "rope":
            q, k = _rope_reference(q), _rope_reference(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(
            ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")
        )
        self.attention = torch.softmax(scores, dim=-1).detach()
        a = self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        x = x + a if self.c.residual else a
        if not self.c.mlp:
            return x
        m = self.c_mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + m if self.c.residual else m


class RefGPT(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd) if c.pos == "learned" else None
        self.h = nn.ModuleList(RefBlock(c) for _ in range(c.n_layer))
        self.ln_final = nn.LayerNorm(c.n_embd, bias=c.bias) if c.layernorm else nn.Identity()
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        if c.tie_weights:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx, targets=None):
        x = self.tok_emb(idx)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        logits = self.head(self.ln_final(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
        return logits, loss


_BLOCK_NAMES = {
    "ln1": "ln_1",
    "attn.qkv": "c_attn",
    "attn.proj": "c_proj",
    "ln2": "ln_2",
    "mlp.fc": "c_fc",
    "mlp.proj": "c_mlp_proj",
}


def _ref_name(name: str) -> str:
    """gpt_core parameter name -> reference parameter name."""
    top = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight", "lm_head.weight": "head.weight"}
    if name in top:
        return top[name]
    if name.startswith("ln_f."):
        return "ln_final." + name[len("ln_f.") :]
    _, layer, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    return f"h.{layer}.{_BLOCK_NAMES[module]}.{param}"


def _randomise(model: nn.Module, gen: torch.Generator) -> None:
    """Non-trivial values everywhere (LayerNorm weights 1 / biases 0 would hide misuse)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if p.dim() == 1 else 0.15
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale + (1.0 if "ln" in name else 0.0))


def _build_pair(config: GPTConfig, gen: torch.Generator) -> tuple[GPT, RefGPT]:
    ours = GPT(config).double()
    _randomise(ours, gen)
    ref = RefGPT(config).double()
    mapped = {_ref_name(n): t for n, t in ours.state_dict().items()}
    ref.load_state_dict(mapped, strict=True)  # every name maps, none is left over
    return ours, ref


CONFIGS = {
    "learned": GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, pos="learned"),
    "none": GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, pos="none"),
    "rope": GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, pos="rope"),
    "no-layernorm-no-residual": GPTConfig(
        vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, layernorm=False, residual=False
    ),
    "attention-only": GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, mlp=False),
    "attention-only-rope-no-layernorm": GPTConfig(
        vocab_size=23, block_size=16, n_layer=2, n_head=2, n_embd=16, mlp=False, pos="rope", layernorm=False
    ),
    "untied-no-bias": GPTConfig(
        vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, tie_weights=False, bias=False
    ),
    "rope-untied-no-bias-no-layernorm": GPTConfig(
        vocab_size=23,
        block_size=16,
        n_layer=3,
        n_head=2,
        n_embd=16,
        pos="rope",
        tie_weights=False,
        bias=False,
        layernorm=False,
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_gpt_matches_builtin_reference_logits_loss_and_every_gradient(gen, close, name):
    config = CONFIGS[name]
    ours, ref = _build_pair(config, gen)
    idx = torch.randint(config.vocab_size, (3, 12), generator=gen)
    targets = torch.randint(config.vocab_size, (3, 12), generator=gen)
    targets[:, ::5] = IGNORE_INDEX

    logits, loss = ours(idx, targets)
    attention = _attention(ours, idx)
    ref_logits, ref_loss = ref(idx, targets)
    close(f"GPT[{name}] logits", logits, ref_logits, TOL)
    close(f"GPT[{name}] loss", loss, ref_loss, TOL)
    close(f"GPT[{name}] attention", attention, torch.stack([b.attention for b in ref.h]), TOL)
    assert logits.abs().max() > 0.1  # not a degenerate comparison

    loss.backward()
    ref_loss.backward()
    ref_params = dict(ref.named_parameters())
    checked = 0
    for pname, p in ours.named_parameters():
        rp = ref_params[_ref_name(pname)]
        assert p.grad is not None and rp.grad is not None, pname
        close(f"GPT[{name}] param grads", p.grad, rp.grad, TOL)
        assert p.grad.abs().max() > 0, f"{pname} got an all-zero gradient"
        checked += 1
    assert checked == len(ref_params)


def _attention(model: GPT, idx: torch.Tensor, **kwargs) -> torch.Tensor:
    """Every block's attention weights (L, B, H, T, T_total), recorded from the pattern hooks."""
    names = [name for name in model.hook_names() if name.endswith(".pattern")]
    _, recorded = model.run_with_cache(idx, names, **kwargs)
    return torch.stack([recorded[name] for name in names])


def test_gpt_output_has_one_shape_whatever_is_asked_for(gen):
    """The same two named fields, nanoGPT's pair, with and without targets: the loss is None when not
    asked for; the attention weights come from the hooks, and asking for them does not change the logits."""
    model = GPT(CONFIGS["learned"])
    idx = torch.randint(23, (2, 9), generator=gen)
    plain = model(idx)
    full = model(idx, idx)
    assert isinstance(plain, GPTOutput) and isinstance(full, GPTOutput)
    assert GPTOutput._fields == ("logits", "loss")
    logits, loss = plain
    assert logits is plain.logits and loss is None
    assert plain.logits.shape == (2, 9, 23)
    assert full.loss.shape == () and full.loss.item() > 0
    hooked_logits, recorded = model.run_with_cache(idx, ["blocks.0.pattern", "blocks.1.pattern"])
    assert recorded["blocks.1.pattern"].shape == (2, 4, 9, 9)  # (B, H, T, T_total)
    assert torch.equal(plain.logits, full.logits) and torch.equal(plain.logits, hooked_logits)


def test_gpt_eval_without_dropout_equals_train_mode(gen, close):
    model = GPT(CONFIGS["rope"]).double()
    idx = torch.randint(23, (2, 9), generator=gen)
    close("GPT train == eval at dropout 0", model.train()(idx).logits, model.eval()(idx).logits, 0.0)


def test_gpt_dropout_changes_output_only_in_training(gen):
    config = GPTConfig(vocab_size=23, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.2)
    model = GPT(config).double()
    idx = torch.randint(23, (2, 9), generator=gen)
    model.eval()
    assert torch.equal(model(idx).logits, model(idx).logits)
    model.train()
    assert not torch.equal(model(idx).logits, model(idx).logits)


# ----------------------------------------------------------------------------- attention output, init, tying


def test_attention_weights_have_layer_batch_head_shape_and_are_causal(gen, close):
    config = GPTConfig(vocab_size=23, block_size=16, n_layer=3, n_head=2, n_embd=16)
    model = GPT(config).double()
    idx = torch.randint(23, (4, 10), generator=gen)
    (logits, loss), attention = model(idx), _attention(model, idx)
    assert attention.shape == (3, 4, 2, 10, 10)
    close("GPT attention rows sum to 1", attention.sum(-1), torch.ones(3, 4, 2, 10, dtype=torch.float64), 1e-12)
    upper = ~torch.ones(10, 10, dtype=torch.bool).tril()
    assert torch.equal(attention[..., upper], torch.zeros_like(attention[..., upper]))
    assert (attention[..., ~upper] > 0).all()
    assert loss is None and logits.shape == (4, 10, 23)


def test_residual_projections_use_scaled_init_std():
    n_layer, n_embd = 4, 256
    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=n_layer, n_head=4, n_embd=n_embd))
    scaled = 0.02 / math.sqrt(2 * n_layer)  # ~0.00707
    for block in model.blocks:
        # 65k and 262k samples: the std estimate is good to well under 2%.
        for w in (block.attn.proj.weight, block.mlp.proj.weight):
            assert abs(w.std().item() / scaled - 1) < 0.02
            assert abs(w.mean().item()) < 0.05 * scaled
        for w in (block.attn.qkv.weight, block.mlp.fc.weight):
            assert abs(w.std().item() / 0.02 - 1) < 0.02
    assert abs(model.wte.weight.std().item() / 0.02 - 1) < 0.05


def test_tied_weights_share_one_parameter_object():
    model = GPT(CONFIGS["learned"])
    assert model.lm_head.weight is model.wte.weight
    model = model.double()  # dtype conversion must not untie
    assert model.lm_head.weight is model.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and "lm_head.weight" not in names
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())


def test_untied_weights_are_separate_parameters():
    tied = GPT(CONFIGS["learned"])
    untied = GPT(GPTConfig(**{**CONFIGS["learned"].to_dict(), "tie_weights": False}))
    assert untied.lm_head.weight is not untied.wte.weight
    assert not torch.equal(untied.lm_head.weight, untied.wte.weight)
    # Untying adds exactly one (vocab_size, n_embd) matrix.
    assert untied.num_parameters() - tied.num_parameters() == 23 * 32


def test_gpt_parameter_names_cover_the_architecture():
    names = {n for n, _ in GPT(CONFIGS["rope"]).named_parameters()}
    assert "wpe.weight" not in names
    assert {"wte.weight", "ln_f.weight", "ln_f.bias", "blocks.1.attn.qkv.weight", "blocks.1.mlp.proj.bias"} <= names


@pytest.mark.parametrize("pos", ["rope", "none"])
def test_gpt_without_learned_positions_accepts_sequences_past_block_size(gen, pos):
    config = GPTConfig(vocab_size=11, block_size=4, n_layer=1, n_head=2, n_embd=8, pos=pos)
    logits = GPT(config)(torch.randint(11, (1, 9), generator=gen)).logits
    assert logits.shape == (1, 9, 11)
    assert torch.isfinite(logits).all()


def test_gpt_with_learned_positions_rejects_sequence_longer_than_block_size(gen):
    model = GPT(GPTConfig(vocab_size=11, block_size=4, n_layer=1, n_head=2, n_embd=8))
    model(torch.randint(11, (1, 4), generator=gen))  # exactly block_size is fine
    with pytest.raises(ValueError, match=r"longer than block_size 4"):
        model(torch.randint(11, (1, 5), generator=gen))
