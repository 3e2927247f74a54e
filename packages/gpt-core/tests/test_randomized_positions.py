"""Randomized positional encodings (Ruoss et al. 2023) and max_positions: the options off are today's model
bit for bit, the sampled ids are what the paper draws, and cached decoding agrees with the full forward."""

from __future__ import annotations

import pytest
import torch

from gpt_core import GPT, GPTConfig, RotaryEmbedding, generate

SHAPE = {"vocab_size": 13, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16}
RANDOMIZED = {"max_positions": 32, "randomized_positions": True}


def _model(seed: int = 0, dtype: torch.dtype = torch.float64, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**SHAPE, **overrides})).to(dtype)


def _ids(gen: torch.Generator, batch: int = 3, length: int = 8) -> torch.Tensor:
    return torch.randint(SHAPE["vocab_size"], (batch, length), generator=gen)


# configuration ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_positions": -1}, r"^max_positions must be a non-negative integer \(0: block_size\), got -1$"),
        ({"max_positions": 16.0}, r"^max_positions must be a non-negative integer"),
        ({"max_positions": True}, r"^max_positions must be a non-negative integer"),
        ({"max_positions": 5}, r"^max_positions \(5\) must be 0 \(block_size\) or at least block_size \(8\)$"),
        ({"randomized_positions": True, "pos": "none", "max_positions": 32}, r"needs pos=learned or pos=rope"),
        ({"randomized_positions": True}, r"needs max_positions larger than block_size \(8\), got 0"),
        ({"randomized_positions": True, "max_positions": 8}, r"needs max_positions larger than block_size \(8\)"),
        ({"max_positions": 32, "pos": "rope"}, r"with pos=rope and randomized_positions off it would do nothing"),
        ({"max_positions": 32, "pos": "none"}, r"with pos=none and randomized_positions off it would do nothing"),
    ],
)
def test_bad_position_ranges_are_refused_in_one_line(overrides, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**SHAPE, **overrides})


@pytest.mark.parametrize(
    ("overrides", "limit"),
    [
        ({}, 8),  # learned: the table is block_size long
        ({"pos": "rope"}, None),
        ({"pos": "none"}, None),
        ({"max_positions": 8}, 8),
        ({"max_positions": 20}, 20),
        ({**RANDOMIZED, "pos": "learned"}, 32),
        ({**RANDOMIZED, "pos": "rope"}, 32),  # n distinct ids need n <= max_positions
    ],
)
def test_position_limit_and_table_length(overrides, limit):
    config = GPTConfig(**{**SHAPE, **overrides})
    assert config.position_limit == limit
    table = GPT(config).wpe
    assert (table.weight.shape[0] if table is not None else None) == (limit if config.pos == "learned" else None)


def test_options_default_to_off():
    config = GPTConfig(**SHAPE)
    assert config.max_positions == 0 and config.randomized_positions is False


# off is today's model -------------------------------------------------------------------------------
@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_off_a_training_forward_draws_nothing_and_uses_positions_0_to_T(gen, pos):
    """Randomization off: training consumes no random numbers (so seeded runs keep their streams), and the
    logits and gradients are bit for bit those of the explicit ids 0 .. T-1 in eval mode."""
    model = _model(pos=pos)
    idx, targets = _ids(gen), _ids(gen)
    state = torch.get_rng_state()
    trained = model.train()(idx, targets)
    assert torch.equal(torch.get_rng_state(), state)
    grads = torch.autograd.grad(trained.loss, list(model.parameters()))
    explicit = model.eval()(idx, targets, positions=torch.arange(8))
    assert torch.equal(trained.logits, explicit.logits)
    for a, b in zip(grads, torch.autograd.grad(explicit.loss, list(model.parameters())), strict=True):
        assert torch.equal(a, b)


def test_max_positions_equal_to_block_size_is_the_default_model(gen):
    idx = _ids(gen)
    default, explicit = _model(), _model(max_positions=8)
    for (name, a), (_, b) in zip(default.state_dict().items(), explicit.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(default(idx).logits, explicit(idx).logits)


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_randomized_model_in_eval_mode_reads_positions_0_to_T(gen, pos):
    """The option changes training only: the same weights without it give the same eval logits."""
    randomized = _model(pos=pos, **RANDOMIZED).eval()
    plain = GPT(GPTConfig(**SHAPE, pos=pos, max_positions=32 if pos == "learned" else 0)).double().eval()
    plain.load_state_dict(randomized.state_dict())
    idx = _ids(gen)
    assert torch.equal(randomized(idx).logits, plain(idx).logits)


# the sampled ids ------------------------------------------------------------------------------------
def test_sampled_ids_are_sorted_distinct_and_within_range():
    model = _model(**RANDOMIZED)
    ids = model.sample_positions(500, 8, torch.Generator().manual_seed(0))
    assert ids.shape == (500, 8) and ids.dtype == torch.long
    assert (ids[:, 1:] > ids[:, :-1]).all()  # strictly increasing: sorted and distinct
    assert ids.min() >= 0 and ids.max() < 32


def test_sampled_ids_cover_the_whole_range_uniformly():
    """Each id is in a uniform 8-subset of range(32) with probability 1/4; 4,000 rows put every count near
    1,000 (a binomial's sd is 27), and the first id is not pinned to 0 as it is in a plain model."""
    ids = _model(**RANDOMIZED).sample_positions(4000, 8, torch.Generator().manual_seed(0))
    counts = torch.bincount(ids.flatten(), minlength=32)
    assert counts.shape == (32,) and (counts - 1000).abs().max() < 150
    assert (ids[:, 0] == 0).float().mean() < 0.5


def test_sampling_the_whole_range_gives_every_id():
    ids = _model(**RANDOMIZED).sample_positions(4, 32, torch.Generator().manual_seed(0))
    assert torch.equal(ids, torch.arange(32).expand(4, 32))


def test_sampling_more_ids_than_the_range_is_refused():
    with pytest.raises(ValueError, match=r"^the sequence needs 33 positions, more than max_positions 32"):
        _model(**RANDOMIZED).sample_positions(2, 33)


def test_sampling_is_reproducible_from_a_seed_and_from_the_global_rng():
    model = _model(**RANDOMIZED)
    first = model.sample_positions(6, 8, torch.Generator().manual_seed(3))
    assert torch.equal(first, model.sample_positions(6, 8, torch.Generator().manual_seed(3)))
    torch.manual_seed(7)
    global_draw = model.sample_positions(6, 8)
    torch.manual_seed(7)
    assert torch.equal(global_draw, model.sample_positions(6, 8))
    assert not torch.equal(global_draw, model.sample_positions(6, 8))  # the stream moves on


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_training_forward_uses_ids_drawn_from_the_global_rng(gen, pos):
    """Training draws with the global RNG (saved in checkpoints, as dropout's is): the same seed gives the same
    forward, which is the forward at the ids `sample_positions` draws from that seed."""
    model = _model(pos=pos, **RANDOMIZED).train()
    idx = _ids(gen)
    torch.manual_seed(11)
    trained = model(idx).logits
    torch.manual_seed(11)
    assert torch.equal(trained, model(idx, positions=model.sample_positions(3, 8)).logits)
    torch.manual_seed(12)
    assert not torch.equal(trained, model(idx).logits)
    assert not torch.equal(trained, model.eval()(idx).logits)  # eval reads 0 .. T-1


def test_explicit_ids_outside_the_range_are_refused(gen):
    with pytest.raises(ValueError, match=r"^position id 32 is outside range\(32\)$"):
        _model(**RANDOMIZED)(_ids(gen), positions=torch.arange(25, 33))


def test_negative_ids_are_refused_where_a_table_would_read_them_from_its_end(gen):
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    with pytest.raises(ValueError, match=r"^position id -1 is negative$"):
        model(torch.randint(11, (1, 4), generator=gen), positions=torch.tensor([-1, 0, 1, 2]))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.arange(4.0), r"^position ids must be int64 \(or int32\), got torch.float32$"),
        (torch.ones(4, dtype=torch.bool), r"^position ids must be int64 \(or int32\), got torch.bool$"),
        (torch.arange(4, dtype=torch.int16), r"^position ids must be int64 \(or int32\), got torch.int16$"),
        (torch.tensor(3), r"^positions must be \(T,\) = \(4,\) or \(B, T\) = \(3, 4\) \(or \(1, T\)\), got \(\)$"),
        (torch.arange(5), r"^positions must be \(T,\) = \(4,\) or \(B, T\) = \(3, 4\) \(or \(1, T\)\), got \(5,\)$"),
        (torch.zeros(2, 4, dtype=torch.long), r"got \(2, 4\)$"),
    ],
)
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_position_ids_of_another_type_or_shape_are_refused_in_one_line(gen, pos, ids, message):
    model = _model(pos=pos, **RANDOMIZED)  # rope would take a float or a bool as an angle, without a word
    with pytest.raises(ValueError, match=message):
        model(_ids(gen, length=4), positions=ids)


def test_int32_position_ids_give_the_int64_ids_logits_and_one_row_serves_every_sequence(gen):
    model = _model(**RANDOMIZED)
    idx, ids = _ids(gen, length=6), model.sample_positions(3, 6, gen)
    assert torch.equal(model(idx, positions=ids.int()).logits, model(idx, positions=ids).logits)
    one = ids[:1]  # (1, T): broadcast over the batch, as (T,) is
    assert torch.equal(model(idx, positions=one).logits, model(idx, positions=one[0]).logits)


def test_rope_with_one_row_of_ids_per_sequence_equals_rotating_each_row_alone(randn):
    rope = RotaryEmbedding(8)
    x = randn(3, 2, 5, 8, grad=False)
    ids = torch.tensor([[0, 3, 4, 9, 20], [1, 2, 3, 4, 5], [7, 8, 30, 31, 40]])
    rows = torch.cat([rope(x[b : b + 1], ids[b]) for b in range(3)])
    assert torch.equal(rope(x, ids), rows)
    assert torch.equal(rope(x[1:2], ids[1]), rope(x[1:2], 1))  # consecutive ids are an offset


# cached decoding and generation -------------------------------------------------------------------------
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_cached_decoding_at_sampled_ids_equals_the_full_forward(gen, close, pos):
    model = _model(pos=pos, **RANDOMIZED).eval()
    idx = _ids(gen, length=20)  # past block_size: the range, not the training length, is the limit
    ids = model.sample_positions(3, 20, gen)
    full = model(idx, positions=ids).logits
    cache = model.new_cache(3, 20)
    steps = [model(idx[:, :6], cache=cache, positions=ids[:, :6]).logits]
    steps += [model(idx[:, t : t + 1], cache=cache, positions=ids[:, t : t + 1]).logits for t in range(6, 20)]
    close(f"randomized {pos}: cached vs full", torch.cat(steps, dim=1), full, 1e-12)


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_cache_holding_the_ids_feeds_each_cached_forward_its_next_slots_ids(gen, close, pos):
    model = _model(pos=pos, **RANDOMIZED).eval()
    idx = _ids(gen, length=20)
    ids = model.sample_positions(3, 20, gen)
    full = model(idx, positions=ids).logits
    cache = model.new_cache(3, 20, ids)
    steps = [model(idx[:, :6], cache=cache).logits]
    steps += [model(idx[:, t : t + 1], cache=cache).logits for t in range(6, 20)]
    close(f"randomized {pos}: cache holding the ids vs full", torch.cat(steps, dim=1), full, 1e-12)
    with pytest.raises(ValueError, match=r"^KV cache is full: 21 positions needed, 20 allocated$"):
        model(idx[:, :1], cache=cache)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([[0, 1, 32]]), r"^position id 32 is outside range\(32\)$"),
        (torch.tensor([[-1, 1, 2]]), r"^position id -1 is negative$"),
        (torch.tensor([0, 1, 2]), r"must be \(batch, max_length\) = \(1, 3\), got \(3,\)$"),
        (torch.tensor([[0, 1]]), r"must be \(batch, max_length\) = \(1, 3\), got \(1, 2\)$"),
        (torch.tensor([[0.0, 1.0, 2.0]]), r"^position ids must be int64 \(or int32\), got torch.float32$"),
    ],
)
def test_a_cache_refuses_ids_outside_the_range_or_of_another_shape(ids, message):
    with pytest.raises(ValueError, match=message):
        _model(**RANDOMIZED).new_cache(1, 3, ids)


def test_a_kv_cache_made_by_hand_has_its_ids_checked_at_its_first_forward(gen):
    from gpt_core import KVCache

    model = _model(pos="rope", **RANDOMIZED)
    c = model.config
    cache = KVCache(c.n_layer, 1, c.n_head, c.head_dim, 4, "cpu", torch.float64, torch.tensor([[0, 1_000_000, 2, 3]]))
    with pytest.raises(ValueError, match=r"^position id 1000000 is outside range\(32\)$"):
        model(_ids(gen, batch=1, length=2), cache=cache)


def test_a_cache_keeps_its_own_copy_of_the_ids_it_checked(gen):
    model = _model(pos="rope", **RANDOMIZED)
    ids = model.sample_positions(1, 4, gen)
    cache = model.new_cache(1, 4, ids)
    ids[0, 3] = 10**6  # out of range, after the check
    assert int(cache.positions.max()) < 32


@pytest.mark.parametrize("static", [False, True])
def test_cached_generation_checks_the_drawn_ids_once_not_at_every_token(gen, monkeypatch, static):
    from gpt_core import positions

    checked = []
    check = positions.check_position_ids
    monkeypatch.setattr(positions, "check_position_ids", lambda c, ids: checked.append(ids.shape) or check(c, ids))
    model = _model(**RANDOMIZED).eval()
    out = generate(model, _ids(gen, length=5), 15, temperature=0.0, generator=torch.Generator().manual_seed(4),
                   static=static)  # fmt: skip
    assert out.shape == (3, 20)
    assert checked == [(3, 19)]  # once, on the host, for the whole generation: a GPU is read once, not per token


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_generation_draws_ids_once_and_agrees_with_and_without_cache(gen, pos):
    model = _model(pos=pos, **RANDOMIZED).eval()
    prompt = _ids(gen, length=5)
    out = {
        use_cache: generate(model, prompt, 15, temperature=0.0, use_cache=use_cache,
                            generator=torch.Generator().manual_seed(4))
        for use_cache in (True, False)
    }  # fmt: skip
    assert out[True].shape == (3, 20)  # learned: the table is 32 long, so it runs past block_size 8
    assert torch.equal(out[True], out[False])


def test_generation_is_reproducible_with_a_seeded_generator_and_depends_on_the_ids(gen):
    model = _model(pos="rope", init_scale=20.0, **RANDOMIZED).eval()  # large weights: logits that feel the ids
    prompt = _ids(gen, batch=64, length=5)

    def run(seed):
        return generate(model, prompt, 10, temperature=0.0, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


def test_a_learned_table_longer_than_the_block_generates_past_it_and_stops_at_its_end(gen):
    model = _model(max_positions=12).eval()
    out = generate(model, _ids(gen, length=5), 50, temperature=0.0)
    assert out.shape == (3, 13)  # 12 positions read, the last one predicting the 13th token
    with pytest.raises(ValueError, match=r"^the sequence needs 13 positions, longer than max_positions 12"):
        model(_ids(gen, length=13))
