"""The parameterised layers (Linear, Embedding, LayerNorm, GELU, MLP) against torch built-ins:
forward, input gradients and parameter gradients, float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpt_core import GELU, MLP, Embedding, LayerNorm, Linear

TOL = 1e-12


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 8), (5, 8), (8,), (2, 3, 4, 8)], ids=["3d", "2d", "1d", "4d"])
def test_linear_matches_f_linear(randn, close, grads_close, bias, shape):
    layer = Linear(8, 6, bias=bias).double()
    assert (layer.bias is None) == (not bias)
    if bias:
        with torch.no_grad():
            layer.bias.normal_()  # zeros would hide a missing or misplaced bias
    x = randn(*shape)
    ours = layer(x)
    theirs = F.linear(x, layer.weight, layer.bias)
    assert ours.shape == (*shape[:-1], 6)
    label = f"Linear {'bias' if bias else 'no bias'}"
    close(label, ours, theirs, TOL)
    params = [layer.weight] + ([layer.bias] if bias else [])
    grads_close(label, ours, theirs, [x, *params], TOL)


def test_linear_accepts_non_contiguous_input(randn, close):
    layer = Linear(8, 3).double()
    x = randn(8, 5, grad=False).t()  # (5, 8), non-contiguous
    assert not x.is_contiguous()
    close("Linear bias", layer(x), F.linear(x, layer.weight, layer.bias), TOL)


def test_linear_parameters_have_expected_shapes_and_init():
    layer = Linear(300, 200)
    assert layer.weight.shape == (200, 300)
    assert layer.bias.shape == (200,)
    assert torch.equal(layer.bias, torch.zeros(200))
    assert abs(layer.weight.std().item() - 0.02) < 0.001
    assert [n for n, _ in Linear(3, 2, bias=False).named_parameters()] == ["weight"]


def test_embedding_matches_f_embedding_with_repeated_ids(gen, close, grads_close):
    table = Embedding(10, 6).double()
    ids = torch.tensor([[0, 3, 3, 9], [9, 1, 3, 0]])  # repeats: their gradients must accumulate
    ours, theirs = table(ids), F.embedding(ids, table.weight)
    assert ours.shape == (2, 4, 6)
    close("Embedding", ours, theirs, TOL)
    grads_close("Embedding", ours, theirs, [table.weight], TOL)
    (g,) = torch.autograd.grad(ours.sum(), table.weight)
    assert torch.equal(g[:, 0], torch.tensor([2.0, 1, 0, 3, 0, 0, 0, 0, 0, 2], dtype=torch.float64))


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_module_matches_f_layer_norm(randn, close, grads_close, bias):
    ln = LayerNorm(16, bias=bias).double()
    with torch.no_grad():
        ln.weight.normal_()
        if bias:
            ln.bias.normal_()
    assert (ln.bias is None) == (not bias)
    x = randn(3, 4, 16, scale=3.0)
    ours = ln(x)
    theirs = F.layer_norm(x, (16,), ln.weight, ln.bias, ln.eps)
    label = f"LayerNorm {'bias' if bias else 'no bias'}"
    close(label, ours, theirs, TOL)
    grads_close(label, ours, theirs, [x, ln.weight] + ([ln.bias] if bias else []), TOL)


def test_gelu_module_matches_f_gelu_tanh(randn, close, grads_close):
    x = randn(4, 10, scale=2.0)
    ours, theirs = GELU()(x), F.gelu(x, approximate="tanh")
    close("GELU module", ours, theirs, TOL)
    grads_close("GELU module", ours, theirs, [x], TOL)
    assert list(GELU().parameters()) == []


@pytest.mark.parametrize("bias", [True, False])
def test_mlp_is_fc_gelu_proj(randn, close, grads_close, bias):
    mlp = MLP(8, bias=bias, dropout_p=0.0).double()
    assert mlp.fc.weight.shape == (32, 8) and mlp.proj.weight.shape == (8, 32)
    x = randn(2, 3, 8, scale=5.0)
    ours = mlp(x)
    theirs = F.linear(
        F.gelu(F.linear(x, mlp.fc.weight, mlp.fc.bias), approximate="tanh"), mlp.proj.weight, mlp.proj.bias
    )
    close("MLP", ours, theirs, TOL)
    grads_close("MLP", ours, theirs, [x, *mlp.parameters()], TOL)


def test_mlp_dropout_acts_only_in_training(randn):
    mlp = MLP(8, bias=True, dropout_p=0.5).double()
    x = randn(4, 8, grad=False)
    mlp.eval()
    assert torch.equal(mlp(x), mlp(x))
    mlp.train()
    y = mlp(x)
    assert (y == 0).any()
    assert not torch.equal(y, mlp.eval()(x))
