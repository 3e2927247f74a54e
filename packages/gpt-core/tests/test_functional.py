"""The hand-written functions (softmax, log_softmax, dropout, layer_norm, gelu, cross_entropy)
pinned, forward and backward, against their PyTorch built-ins in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

from gpt_core import IGNORE_INDEX, cross_entropy, dropout, gelu, layer_norm, log_softmax, reference, softmax

TOL = 1e-12


# ----------------------------------------------------------------------------- softmax family


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch_forward_and_grad(randn, close, grads_close, dim):
    x = randn(3, 5, 11, scale=3.0)
    ours, theirs = softmax(x, dim=dim), torch.softmax(x, dim=dim)
    close("softmax", ours, theirs, TOL)
    grads_close("softmax", ours, theirs, [x], TOL)


def test_softmax_on_large_logits_does_not_overflow(randn, close, grads_close):
    x = randn(4, 9, scale=1.0) * 10.0 + 3000.0  # exp(3000) overflows float64 without the max shift
    x = x.detach().requires_grad_()
    ours = softmax(x)
    assert torch.isfinite(ours).all()
    close("softmax (logits ~3000)", ours, torch.softmax(x, dim=-1), TOL)
    grads_close("softmax (logits ~3000)", ours, torch.softmax(x, dim=-1), [x], TOL)
    close("softmax (logits ~3000) rows sum to 1", ours.sum(-1), torch.ones(4, dtype=torch.float64), TOL)


def test_softmax_on_large_negative_logits_does_not_underflow_to_nan():
    x = torch.tensor([[-5000.0, -5001.0, -5002.0]], dtype=torch.float64)
    ours = softmax(x)
    assert torch.isfinite(ours).all()
    assert torch.allclose(ours, torch.softmax(x, dim=-1), atol=1e-15, rtol=0)


@pytest.mark.parametrize("dim", [-1, 0])
def test_log_softmax_matches_torch_forward_and_grad(randn, close, grads_close, dim):
    x = randn(6, 13, scale=3.0)
    ours, theirs = log_softmax(x, dim=dim), torch.log_softmax(x, dim=dim)
    close("log_softmax", ours, theirs, TOL)
    grads_close("log_softmax", ours, theirs, [x], TOL)


def test_log_softmax_on_large_logits_is_finite_and_exact(randn, close, grads_close):
    x = (randn(5, 7, grad=False) * 50.0 + 2000.0).requires_grad_()
    ours = log_softmax(x)
    assert torch.isfinite(ours).all()
    close("log_softmax (logits ~2000)", ours, torch.log_softmax(x, dim=-1), 1e-11)
    grads_close("log_softmax (logits ~2000)", ours, torch.log_softmax(x, dim=-1), [x], TOL)


# ----------------------------------------------------------------------------- layer_norm


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 16), (7, 16), (16,)], ids=["3d", "2d", "1d"])
def test_layer_norm_matches_torch_forward_and_grads(randn, close, grads_close, with_bias, shape):
    x = randn(*shape, scale=2.0)
    w = randn(16)
    b = randn(16) if with_bias else None
    ours = layer_norm(x, w, b)
    theirs = F.layer_norm(x, (16,), w, b)
    label = f"layer_norm {'bias' if with_bias else 'no bias'}"
    close(label, ours, theirs, TOL)
    grads_close(label, ours, theirs, [x, w] + ([b] if with_bias else []), TOL)


def test_layer_norm_honours_eps(randn, close):
    x = randn(3, 8, scale=0.01, grad=False)  # small variance: eps matters
    w = torch.ones(8, dtype=torch.float64)
    close("layer_norm eps", layer_norm(x, w, None, eps=1e-3), F.layer_norm(x, (8,), w, None, eps=1e-3), TOL)
    assert (layer_norm(x, w, None, eps=1e-3) - layer_norm(x, w, None, eps=1e-5)).abs().max() > 1e-3


def test_layer_norm_normalises_to_zero_mean_unit_variance(randn):
    x = randn(4, 32, scale=5.0, grad=False) + 7.0
    y = layer_norm(x, torch.ones(32, dtype=torch.float64), eps=0.0)
    assert y.mean(-1).abs().max() < 1e-12
    assert (y.var(-1, correction=0) - 1).abs().max() < 1e-12


# ----------------------------------------------------------------------------- gelu


def test_gelu_matches_torch_tanh_approximation(randn, close, grads_close):
    x = randn(4, 50, scale=3.0)
    ours, theirs = gelu(x), F.gelu(x, approximate="tanh")
    close("gelu", ours, theirs, TOL)
    grads_close("gelu", ours, theirs, [x], TOL)


def test_gelu_at_extreme_inputs_matches_torch():
    x = torch.tensor([-1e3, -30.0, -5.0, -1e-8, 0.0, 1e-8, 5.0, 30.0, 1e3], dtype=torch.float64, requires_grad=True)
    ours, theirs = gelu(x), F.gelu(x, approximate="tanh")
    assert torch.isfinite(ours).all()
    assert (ours - theirs).abs().max() <= TOL
    (g1,) = torch.autograd.grad(ours.sum(), x)
    (g2,) = torch.autograd.grad(theirs.sum(), x)
    assert torch.isfinite(g1).all()
    assert (g1 - g2).abs().max() <= TOL


@pytest.mark.parametrize("gelu", [gelu, reference.gelu], ids=["fast", "reference"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gelu_gradient_in_half_precision_stays_finite_at_large_inputs(dtype, gelu):
    """In float16, x d(2u)/dx overflows from |x| = 68 and inf (1 - s) was nan: fp16 training skipped every step."""
    x = torch.tensor([-300.0, -70.0, -3.0, 0.5, 3.0, 70.0, 300.0], dtype=dtype, requires_grad=True)
    (ours,) = torch.autograd.grad(gelu(x).sum(), x)
    wide = x.detach().double().requires_grad_()
    (theirs,) = torch.autograd.grad(F.gelu(wide, approximate="tanh").sum(), wide)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-2, atol=1e-2)


def test_gelu_is_not_the_exact_erf_form(randn):
    """Pins the tanh form: the erf GELU differs from it by ~1e-4 around |x| ~ 2."""
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    assert (gelu(x) - F.gelu(x)).abs().max() > 1e-5


# ----------------------------------------------------------------------------- cross_entropy


def _targets(gen, shape, vocab, ignored_every=3):
    t = torch.randint(vocab, shape, generator=gen)
    t.view(-1)[::ignored_every] = IGNORE_INDEX
    return t


def test_cross_entropy_with_ignored_rows_matches_torch(randn, gen, close, grads_close):
    logits = randn(20, 11, scale=2.0)
    targets = _targets(gen, (20,), 11)
    ours = cross_entropy(logits, targets)
    theirs = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)
    close("cross_entropy 2-D", ours, theirs, TOL)
    grads_close("cross_entropy 2-D", ours, theirs, [logits], TOL)


def test_cross_entropy_on_3d_logits_matches_torch(randn, gen, close, grads_close):
    B, T, V = 3, 7, 13
    logits = randn(B, T, V, scale=2.0)
    targets = _targets(gen, (B, T), V, ignored_every=4)
    ours = cross_entropy(logits, targets)
    # PyTorch wants the class dimension second for (B, T) targets.
    theirs = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=IGNORE_INDEX)
    close("cross_entropy 3-D", ours, theirs, TOL)
    grads_close("cross_entropy 3-D", ours, theirs, [logits], TOL)


def test_cross_entropy_backward_scales_with_upstream_gradient(randn, gen, close):
    logits = randn(10, 5)
    targets = _targets(gen, (10,), 5)
    upstream = torch.tensor(2.5, dtype=torch.float64)
    (ours,) = torch.autograd.grad(cross_entropy(logits, targets), logits, upstream)
    (theirs,) = torch.autograd.grad(F.cross_entropy(logits, targets), logits, upstream)
    close("cross_entropy 2-D grad", ours, theirs, TOL)


def test_cross_entropy_ignored_rows_get_exactly_zero_gradient(randn, gen):
    logits = randn(2, 6, 9)
    targets = _targets(gen, (2, 6), 9, ignored_every=2)
    (grad,) = torch.autograd.grad(cross_entropy(logits, targets), logits)
    ignored = targets == IGNORE_INDEX
    assert ignored.any() and (~ignored).any()
    assert torch.equal(grad[ignored], torch.zeros_like(grad[ignored]))
    assert (grad[~ignored].abs().sum(-1) > 0).all()
    # Each scored row's gradient is (softmax - onehot) / n_scored, so it sums to zero.
    assert grad[~ignored].sum(-1).abs().max() < 1e-15


def test_cross_entropy_ignored_rows_do_not_change_the_loss(randn, gen):
    logits = randn(8, 5, grad=False)
    targets = _targets(gen, (8,), 5, ignored_every=2)
    scrambled = logits.clone()
    scrambled[targets == IGNORE_INDEX] = 1e3 * torch.randn(int((targets == IGNORE_INDEX).sum()), 5, dtype=torch.float64)
    assert cross_entropy(scrambled, targets).item() == cross_entropy(logits, targets).item()


def test_cross_entropy_custom_ignore_index_matches_torch(randn, gen, close):
    logits = randn(12, 6)
    targets = torch.randint(6, (12,), generator=gen)
    ours = cross_entropy(logits, targets, ignore_index=2)
    close("cross_entropy 2-D", ours, F.cross_entropy(logits, targets, ignore_index=2), TOL)


def test_cross_entropy_with_large_logits_is_finite(randn, gen, close):
    logits = (randn(6, 4, grad=False) * 100 + 5000).requires_grad_()
    targets = torch.randint(4, (6,), generator=gen)
    ours = cross_entropy(logits, targets)
    close("cross_entropy (logits ~5000)", ours, F.cross_entropy(logits, targets), 1e-10)
    (g,) = torch.autograd.grad(ours, logits)
    assert torch.isfinite(g).all()


def test_cross_entropy_with_every_row_ignored_is_nan_with_a_zero_gradient_like_torch(randn):
    """A nan gradient (0/0 times 0) would have put nan into every parameter, where PyTorch's leaves them as they are."""
    logits = randn(3, 4)
    targets = torch.full((3,), IGNORE_INDEX)
    for loss in (
        cross_entropy(logits, targets),
        F.cross_entropy(logits, targets),
        reference.cross_entropy(logits, targets),
    ):
        assert torch.isnan(loss)
        (grad,) = torch.autograd.grad(loss, logits)
        assert torch.equal(grad, torch.zeros_like(logits))


def test_cross_entropy_ignores_a_row_of_minus_inf_logits_whose_target_is_ignored(randn):
    """0 times the row's nan (exp(-inf - -inf)) was nan: in the loss and in the row's gradient."""
    logits = randn(3, 5, grad=False)
    logits[1] = float("-inf")
    targets, scored = torch.tensor([2, IGNORE_INDEX, 4]), torch.tensor([True, False, True])
    leaf = logits.clone().requires_grad_()
    loss = cross_entropy(leaf, targets)
    assert torch.allclose(loss, F.cross_entropy(logits[scored], targets[scored]), rtol=0, atol=1e-12)
    (grad,) = torch.autograd.grad(loss, leaf)
    assert torch.isfinite(grad).all() and torch.equal(grad[1], torch.zeros(5, dtype=grad.dtype))


# ----------------------------------------------------------------------------- dropout


def test_dropout_with_p_zero_is_identity_in_training(randn):
    x = randn(5, 7, grad=False)
    assert torch.equal(dropout(x, 0.0, training=True), x)


def test_dropout_in_eval_is_identity(randn):
    x = randn(5, 7, grad=False)
    assert torch.equal(dropout(x, 0.5, training=False), x)


def test_dropout_in_training_keeps_about_1_minus_p_and_rescales(gen):
    p = 0.3
    x = torch.rand(200_000, generator=gen, dtype=torch.float64) + 0.5  # no zeros in the input
    y = dropout(x, p, training=True, generator=gen)
    kept = y != 0
    # Bernoulli(0.7) over 200k draws: std of the fraction is ~1e-3; 5 sigma below.
    assert abs(kept.double().mean().item() - (1 - p)) < 5e-3
    assert torch.equal(y[kept], x[kept] / (1 - p))
    assert torch.equal(y[~kept], torch.zeros_like(y[~kept]))
    # Inverted dropout keeps the expectation.
    assert abs(y.mean().item() - x.mean().item()) < 5e-3


def test_dropout_gradient_is_the_keep_mask_over_1_minus_p(randn):
    x = randn(1000)
    p = 0.5
    y = dropout(x, p, training=True)
    (g,) = torch.autograd.grad(y.sum(), x)
    kept = y.detach() != 0
    assert torch.equal(g, kept.double() / (1 - p))


def test_dropout_is_reproducible_with_the_same_generator_seed():
    x = torch.ones(1000, dtype=torch.float64)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(dropout(x, 0.4, True, g1), dropout(x, 0.4, True, g2))
    assert not torch.equal(dropout(x, 0.4, True, torch.Generator().manual_seed(8)), dropout(x, 0.4, True, g1))


def test_dropout_with_p_one_drops_everything_without_nan():
    x = torch.ones(10, dtype=torch.float64)
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_rejects_probability_outside_unit_interval(p):
    with pytest.raises(ValueError, match="dropout probability must be in"):
        dropout(torch.ones(3), p, training=True)


# ----------------------------------------------------------------------------- gradcheck (hand-derived backwards)


def test_layer_norm_and_gelu_without_grad_equal_their_recorded_forward(randn):
    """Without grad the Function is skipped; the numbers must be the very same."""
    x, w, b = randn(3, 5, 16), randn(16), randn(16)
    recorded = layer_norm(x, w, b), gelu(x)
    with torch.no_grad():
        direct = layer_norm(x, w, b), gelu(x)
    assert all(torch.equal(r.detach(), d) for r, d in zip(recorded, direct, strict=True))
    assert all(r.grad_fn is not None and d.grad_fn is None for r, d in zip(recorded, direct, strict=True))


def test_layer_norm_passes_gradcheck(randn):
    x, w, b = randn(2, 3, 5), randn(5), randn(5)
    assert gradcheck(lambda x, w, b: layer_norm(x, w, b), (x, w, b), eps=1e-6, atol=1e-8)
    assert gradcheck(lambda x, w: layer_norm(x, w, None), (x, w), eps=1e-6, atol=1e-8)


def test_gelu_passes_gradcheck(randn):
    assert gradcheck(gelu, (randn(3, 7, scale=2.0),), eps=1e-6, atol=1e-8)


def test_cross_entropy_passes_gradcheck(randn, gen):
    logits = randn(2, 4, 5)
    targets = _targets(gen, (2, 4), 5)
    assert gradcheck(lambda z: cross_entropy(z, targets), (logits,), eps=1e-6, atol=1e-8)
