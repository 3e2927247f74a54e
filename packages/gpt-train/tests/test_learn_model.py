"""The steps that assemble the model (`multi_head_attention`, `block`, `model`): graded beside gpt-core's own
modules on copied weights, each classic mistake named as a learner writes it, PyTorch's and gpt-core's modules
refused; and the steps' answers together are a minimal GPT equal to `gpt_core.GPT` to 1e-12 in float64."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from learn_transcript import SOLUTIONS, answer, checked, write

import gpt_core
from gpt_train.learn.grader import check_file
from gpt_train.learn.loading import solution
from gpt_train.learn.solutions import (
    attention,
    attention_backward,
    cross_entropy,
    flash_attention,
    gelu,
    layer_norm,
    layer_norm_backward,
)
from gpt_train.learn.steps import BY_NAME

KERNEL_SETS = {
    "the forward steps' kernels": SimpleNamespace(attention=attention.attention, layer_norm=layer_norm.layer_norm,
                                                  gelu=gelu.gelu, cross_entropy=cross_entropy.cross_entropy),
    "the hand-written backward kernels": SimpleNamespace(attention=attention_backward.attention,
                                                         layer_norm=layer_norm_backward.layer_norm, gelu=gelu.gelu,
                                                         cross_entropy=cross_entropy.cross_entropy),
    "flash attention": SimpleNamespace(attention=flash_attention.attention, layer_norm=layer_norm_backward.layer_norm,
                                       gelu=gelu.gelu, cross_entropy=cross_entropy.cross_entropy),
}  # fmt: skip


@pytest.mark.parametrize("kernels", list(KERNEL_SETS))
def test_the_solutions_together_are_gpt_core_s_gpt_to_1e_12(kernels):
    config = gpt_core.GPTConfig(vocab_size=13, block_size=16, n_layer=3, n_head=2, n_embd=16)
    torch.manual_seed(0)
    theirs = gpt_core.GPT(config).double()
    with torch.no_grad():  # off GPT-2's init (norms at 1, biases at 0), so that every parameter shows
        for param in theirs.parameters():
            param.add_(torch.randn_like(param) * 0.2)
    ours = solution("model").GPT(13, 16, 3, 2, 16, KERNEL_SETS[kernels]).double()
    ours.load_state_dict(theirs.state_dict())  # the same names: gpt-core's weights load as they are
    assert ours.lm_head.weight is ours.wte.weight
    idx, targets = torch.randint(13, (2, 16)), torch.randint(13, (2, 16))
    targets[:, :5] = -100
    expected, got = theirs(idx, targets), ours(idx, targets)
    expected.loss.backward()
    got[1].backward()
    assert (got[0] - expected.logits).abs().max() <= 1e-12
    assert (got[1] - expected.loss).abs() <= 1e-12
    gradients = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        assert (param.grad - gradients[name].grad).abs().max() <= 1e-12, name


def test_the_minimal_gpt_is_short_and_has_no_hooks_cache_or_switches():
    source = (SOLUTIONS / "model.py").read_text()
    assert len(source.splitlines()) <= 100
    assert not any(word in source for word in ("hook", "cache", "ablation", "residual:", "if self."))


LEARNER_MISTAKES = {
    "heads split by a view alone": (
        "multi_head_attention",
        ("q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)",
         "q, k, v = [t.view(B, self.n_head, T, C // self.n_head) for t in self.qkv(x).split(C, dim=2)]"),
        "multi_head_attention: a view where a transpose is needed"),
    "heads along the wrong axis": (
        "multi_head_attention",
        ("q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)",
         "q, k, v = self.qkv(x).view(B, T, 3, C // self.n_head, self.n_head).permute(2, 0, 4, 1, 3)"),
        "multi_head_attention: heads split along the wrong axis"),
    "the merge by view": (
        "multi_head_attention", ("y.transpose(1, 2).reshape(B, T, C)", "y.transpose(1, 2).view(B, T, C)"),
        "multi_head_attention: the merge calls .view on y.transpose(1, 2), which is not contiguous"),
    "post-norm": (
        "block", ("x = x + self.attn(self.ln1(x))\n        return x + self.mlp(self.ln2(x))",
                  "x = self.ln1(x + self.attn(x))\n        return self.ln2(x + self.mlp(x))"),
        "block: post-norm"),
    "a residual missing": (
        "block", ("return x + self.mlp(self.ln2(x))", "return self.mlp(self.ln2(x))"),
        "block: a residual is missing"),
    "the norm on the stream": (
        "block", ("x = x + self.attn(self.ln1(x))\n        return x + self.mlp(self.ln2(x))",
                  "x = self.ln1(x)\n        x = x + self.attn(x)\n"
                  "        x = self.ln2(x)\n        return x + self.mlp(x)"),
        "block: the norm is applied to the residual stream itself"),
    "positions from 1": (
        "model", ("wpe(torch.arange(T, device=idx.device))", "wpe(torch.arange(1, T + 1, device=idx.device))"),
        "model: the positions are off by one"),
    "the head untied": (
        "model", ("self.lm_head.weight = self.wte.weight", "pass"),
        "model: the head is untied"),
    "no final norm": (
        "model", ("logits = self.lm_head(self.ln_f(x))", "logits = self.lm_head(x)"),
        "model: the final norm ln_f is never applied"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(LEARNER_MISTAKES))
def test_each_model_steps_classic_mistake_written_as_a_learner_writes_it_is_named(tmp_path, what):
    step, (old, new), said = LEARNER_MISTAKES[what]
    verdict = checked(tmp_path, step, (old, new))
    assert not verdict.passed
    assert verdict.message.splitlines()[0].startswith(said), verdict.message


REFUSED = {
    "PyTorch's attention in the module": (
        "multi_head_attention", ("y = self.attention(q, k, v, True)",
                                 "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)"),
        "multi_head_attention: your MultiHeadAttention calls F.scaled_dot_product_attention, a built-in this course "
        "has you write"),
    "nn.LayerNorm in the block": (
        "block", ("self.ln1 = LayerNorm(n_embd, kernels.layer_norm)", "self.ln1 = nn.LayerNorm(n_embd)"),
        "block: your Block calls F.layer_norm, a built-in this course has you write"),
    "gpt-core's block in the model": (
        "model", ("self.blocks = nn.ModuleList(Block(n_embd, n_head, kernels) for _ in range(n_layer))",
                  "import gpt_core\n"
                  "        config = gpt_core.GPTConfig(vocab_size, block_size, n_layer, n_head, n_embd)\n"
                  "        self.blocks = nn.ModuleList(gpt_core.Block(config) for _ in range(n_layer))"),
        "model: your GPT calls gpt_core.model.Block.forward, gpt-core's own code"),
}  # fmt: skip


@pytest.mark.parametrize("what", list(REFUSED))
def test_pytorchs_and_gpt_cores_modules_inside_a_model_step_are_refused(tmp_path, what):
    step, (old, new), said = REFUSED[what]
    assert checked(tmp_path, step, (old, new)).message.startswith(said)  # a refusal, never a pass


def test_a_kernel_called_with_keyword_arguments_passes(tmp_path):
    """The step's call counter took positional arguments only: `causal=True` failed a right answer."""
    verdict = checked(
        tmp_path, "multi_head_attention", ("self.attention(q, k, v, True)", "self.attention(q, k, v, causal=True)")
    )
    assert verdict.passed, verdict.message


def test_parameters_named_otherwise_than_gpt_core_s_are_one_line(tmp_path):
    source = answer("multi_head_attention", ("self.proj = nn.Linear", "self.out = nn.Linear")).replace(
        "self.proj(", "self.out("
    )
    verdict = check_file(BY_NAME["multi_head_attention"], write(tmp_path, "multi_head_attention", source))
    assert verdict.message == (
        "multi_head_attention: your MultiHeadAttention has a parameter out.bias that "
        "gpt-core's has not (gpt-core's are qkv.weight, qkv.bias, proj.weight, proj.bias)"
    )
