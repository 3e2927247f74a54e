"""Rotary position embedding: an independent float64 reference, norm preservation, relative
positions, identity at position 0."""

from __future__ import annotations

import pytest
import torch

from gpt_core import RotaryEmbedding

TOL = 1e-12
D = 16


def _reference_rope(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Pairs (i, i + d/2) rotated by m * base^(-2i/d), written out element by element in float64."""
    d = x.shape[-1]
    half = d // 2
    out = torch.empty_like(x)
    for t in range(x.shape[-2]):
        m = offset + t
        for i in range(half):
            angle = torch.tensor(m * base ** (-2.0 * i / d), dtype=torch.float64)
            c, s = torch.cos(angle), torch.sin(angle)
            a, b = x[..., t, i], x[..., t, i + half]
            out[..., t, i] = a * c - b * s
            out[..., t, i + half] = a * s + b * c
    return out


@pytest.mark.parametrize("offset", [0, 5, 100])
def test_rope_matches_independent_reference_in_float64(randn, close, offset):
    x = randn(2, 3, 6, D, grad=False)
    close("RoPE vs reference", RotaryEmbedding(D)(x, offset), _reference_rope(x, offset), TOL)


def test_rope_gradient_is_the_inverse_rotation(randn, close, grads_close):
    x = randn(1, 2, 5, D)
    ours = RotaryEmbedding(D)(x, 3)
    grads_close("RoPE vs reference", ours, _reference_rope(x, 3), [x], TOL)


def test_rope_preserves_the_norm_of_every_head_vector(randn, close):
    x = randn(2, 4, 50, D, grad=False)
    y = RotaryEmbedding(D)(x, 7)
    close("RoPE norm preserved", y.norm(dim=-1), x.norm(dim=-1), TOL)
    assert (y - x).abs().max() > 0.1  # it does rotate


def test_rope_position_zero_is_identity(randn):
    x = randn(2, 3, 4, D, grad=False)
    y = RotaryEmbedding(D)(x)
    assert torch.equal(y[..., 0, :], x[..., 0, :])
    assert not torch.equal(y[..., 1, :], x[..., 1, :])


@pytest.mark.parametrize("m,n", [(0, 0), (3, 0), (0, 5), (9, 4), (17, 30)])
@pytest.mark.parametrize("shift", [1, 7, 40])
def test_rope_score_depends_only_on_relative_position(randn, close, m, n, shift):
    rope = RotaryEmbedding(D)
    q, k = randn(1, 1, 1, D, grad=False), randn(1, 1, 1, D, grad=False)
    score = (rope(q, m) * rope(k, n)).sum()
    shifted = (rope(q, m + shift) * rope(k, n + shift)).sum()
    close("RoPE relative score", shifted, score, TOL)


def test_rope_score_does_change_with_relative_distance(randn):
    rope = RotaryEmbedding(D)
    q, k = randn(1, 1, 1, D, grad=False), randn(1, 1, 1, D, grad=False)
    scores = [(rope(q, m) * rope(k, 0)).sum().item() for m in range(5)]
    assert len({round(s, 9) for s in scores}) == 5


def test_rope_offset_equals_slicing_a_longer_sequence(randn, close):
    rope = RotaryEmbedding(D)
    x = randn(1, 2, 10, D, grad=False)
    close("RoPE offset", rope(x[:, :, 6:], 6), rope(x)[:, :, 6:], TOL)


def test_rope_keeps_float32_dtype_and_is_close_to_float64(randn):
    x = randn(1, 1, 20, D, grad=False)
    y32 = RotaryEmbedding(D)(x.float(), 3)
    assert y32.dtype == torch.float32
    assert (y32.double() - _reference_rope(x, 3)).abs().max() < 1e-5


def test_rope_rejects_odd_head_size():
    with pytest.raises(ValueError, match="even head size"):
        RotaryEmbedding(7)


def test_rope_has_no_parameters_or_persistent_state():
    rope = RotaryEmbedding(D)
    assert list(rope.parameters()) == []
    assert rope.state_dict() == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_model_cast_to_16_bits_keeps_its_rotation_angles_in_float32(dtype):
    """model.to(bfloat16) casts every float buffer: rounded to 16 bits, the frequencies' error grows with the
    position (0.7 rad at 4,096); the angles are computed in float32 for 16-bit inputs."""
    positions = torch.arange(4096)
    exact_cos, exact_sin = RotaryEmbedding(64).angles(positions, torch.float64)
    cos, sin = RotaryEmbedding(64).to(dtype).angles(positions, dtype)
    resolution = torch.finfo(dtype).eps  # the 16-bit rounding of values in [-1, 1]
    assert (cos.double() - exact_cos).abs().max() <= resolution
    assert (sin.double() - exact_sin).abs().max() <= resolution
