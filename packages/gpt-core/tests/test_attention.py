"""The fast attention (hand-derived backward), its weights and MultiHeadAttention against
F.scaled_dot_product_attention, float64, (B, H, T, d) = (2, 4, 7, 16)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from gpt_core import MultiHeadAttention, attention, attention_weights, causal_mask, reference
from gpt_core.kernels.attention import _transposed_times

TOL = 1e-12
B, H, T, D = 2, 4, 7, 16


def _qkv(randn, n_queries=T, n_keys=T, d=D):
    return randn(B, H, n_queries, d), randn(B, H, n_keys, d), randn(B, H, n_keys, d)


def _suffix_mask(n_queries, n_keys):
    """Queries are the last n_queries of n_keys positions: query i sees keys 0 .. n_keys - n_queries + i."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)


@pytest.mark.parametrize("n_queries", [1, T])
def test_attention_without_grad_equals_its_recorded_forward(randn, n_queries):
    """Without grad the Function is skipped (generation, evaluation); the numbers must be the very same."""
    q, k, v = _qkv(randn, n_queries=n_queries)
    recorded = attention(q, k, v, causal=True)
    with torch.no_grad():
        direct = attention(q, k, v, causal=True)
    assert torch.equal(recorded.detach(), direct)
    assert recorded.grad_fn is not None and direct.grad_fn is None


def test_attention_causal_matches_torch(randn, close, grads_close):
    q, k, v = _qkv(randn)
    ours = attention(q, k, v, causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    close("attention causal", ours, theirs, TOL)
    grads_close("attention causal", ours, theirs, [q, k, v], TOL)


def test_attention_non_causal_matches_torch(randn, close, grads_close):
    q, k, v = _qkv(randn)
    ours = attention(q, k, v, causal=False)
    theirs = F.scaled_dot_product_attention(q, k, v)
    close("attention non-causal", ours, theirs, TOL)
    grads_close("attention non-causal", ours, theirs, [q, k, v], TOL)


def test_attention_non_causal_with_more_queries_than_keys_matches_torch(randn, close, grads_close):
    q, k, v = _qkv(randn, n_queries=9, n_keys=4)
    ours = attention(q, k, v, causal=False)
    theirs = F.scaled_dot_product_attention(q, k, v)
    close("attention non-causal", ours, theirs, TOL)
    grads_close("attention non-causal", ours, theirs, [q, k, v], TOL)


@pytest.mark.parametrize("n_queries", [1, 3, 6])
def test_attention_causal_with_query_offset_matches_torch_with_explicit_mask(randn, close, grads_close, n_queries):
    q, k, v = _qkv(randn, n_queries=n_queries)
    ours = attention(q, k, v, causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=_suffix_mask(n_queries, T))
    close("attention causal offset", ours, theirs, TOL)
    grads_close("attention causal offset", ours, theirs, [q, k, v], TOL)


@pytest.mark.parametrize("n_queries", [T, 3])
def test_attention_weights_are_causal_softmax_of_scaled_scores(randn, close, grads_close, n_queries):
    q, k, _ = _qkv(randn, n_queries=n_queries)
    weights = attention_weights(q, k, causal=True)
    assert weights.shape == (B, H, n_queries, T)
    allowed = _suffix_mask(n_queries, T)
    close("weights rows sum to 1", weights.sum(-1), torch.ones(B, H, n_queries, dtype=torch.float64), TOL)
    assert torch.equal(weights[..., ~allowed], torch.zeros_like(weights[..., ~allowed]))
    assert (weights[..., allowed] > 0).all()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(D)).masked_fill(~allowed, float("-inf"))
    theirs = torch.softmax(scores, dim=-1)
    close("attention weights", weights, theirs, TOL)
    grads_close("attention weights", weights, theirs, [q, k], TOL)


def test_attention_non_causal_weights_are_full_softmax(randn, close):
    q, k, _ = _qkv(randn)
    weights = attention_weights(q, k, causal=False)
    close("attention weights", weights, torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D), dim=-1), TOL)
    assert (weights > 0).all()


@pytest.mark.parametrize("causal", [True, False])
def test_attention_is_its_weights_times_v_bit_for_bit(randn, causal):
    """The fused kernel and `attention_weights` share their arithmetic: a hooked model's attention is the
    unhooked one's."""
    q, k, v = _qkv(randn)
    with torch.no_grad():
        assert torch.equal(attention(q, k, v, causal), attention_weights(q, k, causal) @ v)


def test_attention_with_large_scores_stays_finite(randn, close):
    q, k, v = _qkv(randn)
    q = (q.detach() * 200).requires_grad_()
    ours, weights = attention(q, k, v, causal=True), attention_weights(q, k, causal=True)
    assert torch.isfinite(ours).all() and torch.isfinite(weights).all()
    close("attention causal (large scores)", ours, F.scaled_dot_product_attention(q, k, v, is_causal=True), 1e-10)


def test_attention_causal_rejects_more_queries_than_keys(randn):
    q, k, v = _qkv(randn, n_queries=5, n_keys=3)
    with pytest.raises(ValueError, match="no more queries than keys"):
        attention(q, k, v, causal=True)
    assert reference.attention(q, k, v, causal=True)[..., :2, :].isnan().all()  # the definition: no key to see


def test_causal_mask_aligns_queries_to_the_end_of_the_keys():
    expected = torch.tensor(
        [
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(causal_mask(3, 5, torch.device("cpu")), expected)
    assert torch.equal(causal_mask(4, 4, torch.device("cpu")), torch.ones(4, 4, dtype=torch.bool).tril())


# ----------------------------------------------------------------------------- dropout inside attention


def _reference_dropout_attention(q, k, v, keep, p, causal=True):
    """Pure autograd: softmax(q k^T / sqrt(d)) masked, the same keep mask, rescaled by 1/(1-p)."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~_suffix_mask(n_queries, n_keys), float("-inf"))
    return (torch.softmax(scores, dim=-1) * keep / (1 - p)) @ v


@pytest.mark.parametrize("causal", [True, False])
def test_attention_dropout_matches_autograd_reimplementation_with_same_keep_mask(randn, close, grads_close, causal):
    p = 0.3
    q, k, v = _qkv(randn)
    torch.manual_seed(42)
    ours = attention(q, k, v, causal=causal, dropout_p=p)
    # The kernel draws its keep mask with one rand_like of the (B, H, Tq, Tk) weights: replay the same draw.
    torch.manual_seed(42)
    keep = torch.rand(B, H, T, T, dtype=torch.float64) >= p
    assert 0.5 < keep.double().mean().item() < 0.9
    theirs = _reference_dropout_attention(q, k, v, keep, p, causal)
    close("attention dropout vs autograd", ours, theirs, TOL)
    grads_close("attention dropout vs autograd", ours, theirs, [q, k, v], TOL)
    assert (ours - attention(q, k, v, causal=causal)).abs().max() > 1e-3


def test_attention_dropout_p_one_gives_zero_output_not_nan(randn):
    q, k, v = _qkv(randn)
    out = attention(q, k, v, causal=True, dropout_p=1.0)
    assert torch.equal(out, torch.zeros_like(out))


def test_attention_rejects_dropout_outside_unit_interval(randn):
    q, k, v = _qkv(randn)
    with pytest.raises(ValueError, match="dropout_p must be in"):
        attention(q, k, v, dropout_p=1.5)


# ----------------------------------------------------------------------------- gradcheck


SHAPES = [(True, 4, 4), (True, 2, 5), (True, 1, 5), (False, 4, 4), (False, 3, 5)]


@pytest.mark.parametrize("causal,n_queries,n_keys", SHAPES, ids=str)
def test_attention_passes_gradcheck(gen, causal, n_queries, n_keys):
    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)

    q, k, v = r(1, 2, n_queries, 3), r(1, 2, n_keys, 3), r(1, 2, n_keys, 3)
    assert gradcheck(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_one_query_backward_products_are_the_batched_matmuls_bits(dtype):
    """With one query the backward's P^T dO and dS^T q are outer products, taken by broadcasting: the very
    bits the batched matmul gives (one product per entry), in every dtype."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 4, 1, 9, generator=gen).to(dtype), torch.randn(64, 4, 1, 16, generator=gen).to(dtype)
    assert torch.equal(_transposed_times(a, b), a.transpose(-2, -1) @ b)
    a, b = torch.randn(8, 4, 3, 9, generator=gen).to(dtype), torch.randn(8, 4, 3, 16, generator=gen).to(dtype)
    assert torch.equal(_transposed_times(a, b), a.transpose(-2, -1) @ b)  # more queries: the matmul itself


# ----------------------------------------------------------------------------- MultiHeadAttention


def _reference_mha(mha: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    Bx, Tx, C = x.shape
    n_head = mha.n_head
    q, k, v = F.linear(x, mha.qkv.weight, mha.qkv.bias).split(C, dim=-1)
    q, k, v = (t.view(Bx, Tx, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(Bx, Tx, C)
    return F.linear(y, mha.proj.weight, mha.proj.bias)


@pytest.mark.parametrize("bias", [True, False])
def test_multi_head_attention_matches_torch_reference(randn, close, grads_close, bias):
    mha = MultiHeadAttention(32, 4, bias=bias, dropout_p=0.0, rope=None).double()
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    x = randn(2, 6, 32)
    ours = mha(x)
    seen = []
    with mha._hooks.added({"blocks.0.pattern": lambda w, name: seen.append(w)}):
        assert torch.equal(mha(x), ours)  # the weights, read through the pattern hook, change nothing
    theirs = _reference_mha(mha, x)
    assert seen[0].shape == (2, 4, 6, 6)
    close("MultiHeadAttention", ours, theirs, TOL)
    grads_close("MultiHeadAttention", ours, theirs, [x, *mha.parameters()], TOL)


def test_multi_head_attention_dropout_only_in_training(randn, close):
    mha = MultiHeadAttention(16, 2, bias=True, dropout_p=0.5, rope=None).double()
    x = randn(2, 5, 16, grad=False)
    mha.eval()
    close("MultiHeadAttention", mha(x), _reference_mha(mha, x), TOL)
    mha.train()
    assert (mha(x) - _reference_mha(mha, x)).abs().max() > 1e-3
