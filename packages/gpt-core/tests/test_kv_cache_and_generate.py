"""KV-cache decoding against the full forward, and generation: greedy, sampled, cached or not,
stopping at block_size for learned positions and running past it otherwise."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from wrong_kernels import online_softmax

from gpt_core import DEFAULT_KERNELS, GPT, KERNEL_SETS, GPTConfig, KVCache, generate, next_token, softmax

V = 17


def _model(pos: str, block_size: int = 32, dtype=torch.float64, n_layer: int = 2) -> GPT:
    config = GPTConfig(vocab_size=V, block_size=block_size, n_layer=n_layer, n_head=2, n_embd=16, pos=pos)
    return GPT(config).to(dtype).eval()


def _sharpen(model: GPT, gen: torch.Generator) -> GPT:
    """Scale the weights up so the random model has clear preferences (not near-uniform logits)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.3)
    return model


# ----------------------------------------------------------------------------- KV cache vs full forward


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_cached_incremental_logits_equal_full_forward(gen, close, pos):
    model = _sharpen(_model(pos), gen)
    idx = torch.randint(V, (3, 14), generator=gen)
    with torch.no_grad():
        full = model(idx).logits
        cache = model.new_cache(3, 14)
        steps = [model(idx[:, :5], cache=cache).logits]
        steps += [model(idx[:, t : t + 1], cache=cache).logits for t in range(5, 14)]
    assert cache.length == 14
    close(f"KV cache vs full ({pos})", torch.cat(steps, dim=1), full, 1e-10)


def _with_attention(model: GPT, idx: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits and every block's attention weights (L, B, H, T, T_total), from the pattern hooks."""
    names = [name for name in model.hook_names() if name.endswith(".pattern")]
    logits, recorded = model.run_with_cache(idx, names, **kwargs)
    return logits, torch.stack([recorded[name] for name in names])


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_cached_decoding_in_uneven_chunks_equals_full_forward(gen, close, pos):
    """Chunks of more than one token exercise the offset causal mask inside the cache."""
    model = _sharpen(_model(pos), gen)
    idx = torch.randint(V, (2, 12), generator=gen)
    with torch.no_grad():
        full, full_att = _with_attention(model, idx)
        cache = model.new_cache(2, 12)
        parts, atts = [], []
        for a, b in [(0, 3), (3, 7), (7, 8), (8, 12)]:
            logits, att = _with_attention(model, idx[:, a:b], cache=cache)
            parts.append(logits)
            assert att.shape == (2, 2, 2, b - a, b)  # (L, B, H, new queries, keys so far)
            atts.append(att[..., : b - a, :b])
    close(f"KV cache vs full ({pos})", torch.cat(parts, dim=1), full, 1e-10)
    # Each chunk's attention rows equal the matching rows of the full attention.
    for (a, b), att in zip([(0, 3), (3, 7), (7, 8), (8, 12)], atts, strict=True):
        close(f"KV cache attention ({pos})", att, full_att[..., a:b, :b], 1e-10)


def test_kv_cache_raises_a_clear_error_when_full(gen):
    model = _model("rope")
    cache = model.new_cache(1, 4)
    model(torch.randint(V, (1, 3), generator=gen), cache=cache)
    model(torch.randint(V, (1, 1), generator=gen), cache=cache)
    assert cache.length == 4
    with pytest.raises(ValueError, match=r"KV cache is full: 5 positions needed, 4 allocated"):
        model(torch.randint(V, (1, 1), generator=gen), cache=cache)


def test_a_cached_forward_refuses_an_input_of_another_batch_than_the_caches(gen):
    model = _model("rope")
    cache = model.new_cache(2, 6)
    for batch in (1, 3):
        with pytest.raises(ValueError, match=rf"^the KV cache holds 2 sequences, the input {batch}$"):
            model(torch.randint(V, (batch, 2), generator=gen), cache=cache)
    assert cache.length == 0 and not cache.keys.any()


@pytest.mark.parametrize("parts", [(8,), (3, 5)], ids=["one forward", "two forwards"])
@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_a_forward_through_the_cache_has_the_gradients_of_the_forward_without_it(gen, kernels, parts):
    """The next layer's write into the shared buffers changed the keys a backward had saved: autograd refused."""
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=2, n_head=2, n_embd=16), KERNEL_SETS[kernels]).double()
    x, y = torch.randint(V, (2, 8), generator=gen), torch.randint(V, (2, 8), generator=gen)
    model(x, y).loss.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    cache, start, loss = model.new_cache(2, 8), 0, 0.0
    for n in parts:  # each part's mean loss weighted by its share of the tokens: the whole sequence's mean
        loss = loss + model(x[:, start : start + n], y[:, start : start + n], cache=cache).loss * n / 8
        start += n
    loss.backward()
    for param, grad in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(param.grad, grad, rtol=0, atol=1e-12)


def test_a_cached_forward_needing_no_gradient_after_one_that_did_leaves_that_ones_backward_intact(gen):
    """Only k and v of the forward at hand decided the copy: the keys of an earlier forward, still in the graph, were
    changed in place by the next layer's write."""
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=2, n_head=2, n_embd=16)).double()
    x = torch.randint(V, (2, 8), generator=gen)
    cache = model.new_cache(2, 8)
    first = model(x[:, :3], cache=cache).logits.sum()
    model.requires_grad_(False)
    second = model(x[:, 3:], cache=cache).logits.sum()
    (first + second).backward()


def test_kv_cache_store_returns_every_filled_position():
    cache = KVCache(n_layer=2, batch_size=1, n_head=1, head_dim=2, max_length=5, device="cpu", dtype=torch.float64)
    k1, v1 = torch.ones(1, 1, 2, 2), 2 * torch.ones(1, 1, 2, 2)
    keys, values = cache.store(1, k1.double(), v1.double())
    assert keys.shape == (1, 1, 2, 2) and torch.equal(values, v1.double())
    cache.advance(2)
    keys, values = cache.store(1, 3 * torch.ones(1, 1, 1, 2, dtype=torch.float64), torch.zeros(1, 1, 1, 2).double())
    assert keys.shape == (1, 1, 3, 2)
    assert keys[0, 0, :, 0].tolist() == [1.0, 1.0, 3.0]
    assert torch.equal(cache.keys[0], torch.zeros(1, 1, 5, 2, dtype=torch.float64))  # other layer untouched


def test_new_cache_matches_model_shape_and_dtype():
    model = _model("none", n_layer=3)
    cache = model.new_cache(batch_size=4, max_length=9)
    assert cache.keys.shape == (3, 4, 2, 9, 8)
    assert cache.keys.dtype == torch.float64 and cache.length == 0


def test_learned_positions_with_cache_refuse_to_pass_block_size(gen):
    model = _model("learned", block_size=6)
    cache = model.new_cache(1, 10)
    model(torch.randint(V, (1, 6), generator=gen), cache=cache)
    with pytest.raises(ValueError, match="longer than block_size"):
        model(torch.randint(V, (1, 1), generator=gen), cache=cache)


# ----------------------------------------------------------------------------- greedy generation


def _greedy_by_hand(model: GPT, idx: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        for _ in range(n):
            logits = model(idx).logits
            idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
    return idx


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_greedy_generation_is_identical_with_and_without_cache_float32(gen, pos):
    model = _model(pos, block_size=32, dtype=torch.float32)  # randomly initialised, float32
    prompt = torch.randint(V, (4, 5), generator=gen)
    with_cache = generate(model, prompt, 20, temperature=0.0, use_cache=True)
    without = generate(model, prompt, 20, temperature=0.0, use_cache=False)
    assert with_cache.shape == (4, 25)
    assert torch.equal(with_cache[:, :5], prompt)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache, _greedy_by_hand(model, prompt, 20))


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_with_learned_positions_stops_at_block_size(gen, use_cache):
    """The model never reads more than block_size tokens (it would raise), so the output ends
    with the token predicted from one full block: block_size + 1 tokens, however many were asked."""
    model = _sharpen(_model("learned", block_size=12), gen)
    prompt = torch.randint(V, (2, 5), generator=gen)
    out = generate(model, prompt, 30, temperature=0.0, use_cache=use_cache)
    assert out.shape == (2, 12 + 1)
    assert torch.equal(out, _greedy_by_hand(model, prompt, 8))
    # Asking for fewer than fit is honoured exactly.
    assert generate(model, prompt, 3, temperature=0.0, use_cache=use_cache).shape == (2, 8)


def test_generate_with_learned_positions_rejects_prompt_longer_than_block_size(gen):
    model = _model("learned", block_size=4)
    with pytest.raises(ValueError, match="longer than block_size"):
        generate(model, torch.randint(V, (1, 5), generator=gen), 3)


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_from_a_full_block_adds_exactly_one_token(gen, use_cache):
    model = _model("learned", block_size=6)
    prompt = torch.randint(V, (2, 6), generator=gen)
    out = generate(model, prompt, 5, temperature=0.0, use_cache=use_cache)
    assert out.shape == (2, 7)
    assert torch.equal(out, _greedy_by_hand(model, prompt, 1))


def test_generate_with_zero_new_tokens_returns_the_prompt(gen):
    prompt = torch.randint(V, (2, 3), generator=gen)
    for pos in ("learned", "rope"):
        assert torch.equal(generate(_model(pos), prompt, 0), prompt)


@pytest.mark.parametrize("pos", ["rope", "none"])
def test_generate_without_learned_positions_runs_past_block_size(gen, pos):
    model = _sharpen(_model(pos, block_size=8), gen)
    prompt = torch.randint(V, (3, 4), generator=gen)
    with_cache = generate(model, prompt, 14, temperature=0.0, use_cache=True)
    without = generate(model, prompt, 14, temperature=0.0, use_cache=False)
    assert with_cache.shape == (3, 18) and with_cache.shape[1] > model.config.block_size
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache, _greedy_by_hand(model, prompt, 14))


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("use_cache", [True, False])
def test_top_k_one_sampling_equals_greedy(gen, use_cache):
    model = _model("rope", dtype=torch.float32)
    prompt = torch.randint(V, (4, 3), generator=gen)
    sampled = generate(model, prompt, 15, temperature=1.3, top_k=1, use_cache=use_cache, generator=gen)
    assert torch.equal(sampled, generate(model, prompt, 15, temperature=0.0, use_cache=use_cache))


def test_sampling_with_the_same_generator_seed_is_reproducible(gen):
    model = _model("learned", dtype=torch.float32)
    prompt = torch.randint(V, (4, 3), generator=gen)

    def sample(seed):
        return generate(model, prompt, 20, temperature=1.0, generator=torch.Generator().manual_seed(seed))

    a, b, c = sample(5), sample(5), sample(6)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # Sampling from a near-uniform random model is not greedy.
    assert not torch.equal(a, generate(model, prompt, 20, temperature=0.0))


def test_sampling_with_and_without_cache_agree_for_the_same_seed(gen):
    model = _sharpen(_model("none"), gen)
    prompt = torch.randint(V, (2, 3), generator=gen)
    a = generate(model, prompt, 10, temperature=0.8, use_cache=True, generator=torch.Generator().manual_seed(3))
    b = generate(model, prompt, 10, temperature=0.8, use_cache=False, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("temperature", [-0.5, float("nan"), float("inf")])
def test_negative_or_non_finite_temperature_raises(gen, temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        generate(_model("rope"), torch.randint(V, (1, 2), generator=gen), 3, temperature=temperature)


def test_top_k_below_one_raises(gen):
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        generate(_model("rope"), torch.randint(V, (1, 2), generator=gen), 3, top_k=0)


@pytest.mark.parametrize("shape", [(1, 0), (0, 3), (3,), (1, 2, 1)])
def test_a_prompt_that_is_not_b_by_t_tokens_raises_naming_its_shape(shape):
    message = f"idx must be (B, T) token ids with B >= 1 and T >= 1, got shape {shape}"
    with pytest.raises(ValueError, match=re.escape(message)):
        generate(_model("rope"), torch.zeros(shape, dtype=torch.long), 3)


def test_negative_max_new_tokens_raises(gen):
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got -1"):
        generate(_model("rope"), torch.randint(V, (1, 2), generator=gen), -1)


def test_generate_does_not_build_a_graph(gen):
    out = generate(_model("rope"), torch.randint(V, (1, 2), generator=gen), 3)
    assert not out.requires_grad and out.dtype == torch.long


def test_generated_tokens_can_be_trained_on(gen):
    """generate runs in inference mode but must hand back an ordinary tensor that autograd can save."""
    model = _model("learned")
    out = generate(model, torch.randint(V, (2, 2), generator=gen), 5, temperature=0.0)
    assert not out.is_inference()
    loss = model.train()(out[:, :-1], out[:, 1:]).loss
    loss.backward()
    assert model.wte.weight.grad is not None


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_training_after_generation_at_the_same_lengths_works(gen, pos):
    """Generation builds (and caches) causal biases in inference mode; training at those lengths must still work."""
    model = _model(pos)
    generate(model, torch.randint(V, (2, 5), generator=gen), 4, temperature=0.0, use_cache=False)  # lengths 5..8
    x = torch.randint(V, (3, 8), generator=gen)
    loss = model.train()(x, x).loss
    loss.backward()
    assert torch.isfinite(loss) and model.wte.weight.grad is not None


def test_next_token_with_zero_temperature_is_argmax(gen):
    logits = torch.randn(6, V, generator=gen)
    assert torch.equal(next_token(logits, temperature=0.0), logits.argmax(-1))


@pytest.mark.parametrize(("dtype", "temperature"), [(torch.float16, 1e-4), (torch.float32, 1e-300)])
def test_a_temperature_so_small_it_overflows_the_logits_samples_the_best_token(dtype, temperature):
    """logits / T overflowed to inf, and the softmax to nan: a traceback from the draw."""
    logits = torch.tensor([[10.0, 9.0, 2.0], [1.0, 3.0, 2.0]], dtype=dtype)
    picks = [next_token(logits, temperature, generator=torch.Generator().manual_seed(s)).tolist() for s in range(20)]
    assert picks == [[0, 1]] * 20


@pytest.mark.parametrize("top_k", [None, 1])
def test_two_bfloat16_logits_a_small_temperature_keeps_apart_never_tie(top_k):
    """Divided in bfloat16, 11.6875 / 1e-30 and 11.75 / 1e-30 rounded to one value: the worse token was drawn half
    the time, with top_k=1 too."""
    logits = torch.tensor([[11.6875, 11.75]], dtype=torch.bfloat16).expand(2000, 2)
    assert (next_token(logits, 1e-30, top_k, torch.Generator().manual_seed(0)) == 1).all()


def test_a_logit_so_low_it_overflows_to_minus_inf_leaves_the_others_sampled():
    """Only -3e38 / 0.5 overflowed, to -inf (probability 0, as it should be), and the row was made greedy."""
    logits = torch.tensor([[-3e38, 0.0, 0.1]]).expand(20000, 3)
    counts = torch.bincount(next_token(logits, 0.5, generator=torch.Generator().manual_seed(0)), minlength=3)
    expected = torch.softmax(torch.tensor([0.0, 0.2], dtype=torch.float64), dim=0) * 20000  # 9,002 and 10,998
    assert counts[0] == 0 and torch.allclose(counts[1:].double(), expected, atol=300)  # 4.3 standard deviations


def test_a_model_in_training_mode_with_dropout_is_refused_by_generate(gen):
    config = GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.3)
    model, prompt = GPT(config), torch.randint(V, (1, 2), generator=gen)
    with pytest.raises(
        ValueError, match=re.escape("dropout at every step of a model in training mode; call model.eval")
    ):
        generate(model, prompt, 3, temperature=0.0)
    assert generate(model.eval(), prompt, 3, temperature=0.0).shape == (1, 5)


def test_next_token_top_k_restricts_to_the_k_most_likely(gen):
    row = torch.randn(V, generator=gen, dtype=torch.float64)
    logits = row.expand(4000, V)
    picks = next_token(logits, temperature=1.0, top_k=3, generator=gen)
    assert set(picks.tolist()) == set(row.topk(3).indices.tolist())


def test_next_token_samples_from_tempered_softmax(gen):
    row = torch.randn(5, generator=gen, dtype=torch.float64)
    n = 40_000
    picks = next_token(row.expand(n, 5), temperature=0.7, generator=gen)
    freq = torch.bincount(picks, minlength=5).double() / n
    expected = softmax(row / 0.7)
    # Binomial standard error is at most 0.0025 at n = 40k; allow 5 sigma.
    assert (freq - expected).abs().max() < 0.0125


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_next_token_draws_what_torch_multinomial_draws_from_the_same_generator(dtype):
    """The same tokens as torch.multinomial(probs, 1) for one seed, row by row: the same algorithm, its draws
    taken in the same order."""
    logits = torch.randn(64, V, generator=torch.Generator().manual_seed(1), dtype=dtype) * 3
    for temperature, top_k in [(1.0, None), (0.7, 5)]:
        ours = next_token(logits, temperature, top_k, torch.Generator().manual_seed(2))
        scaled = logits / temperature
        if top_k is not None:
            scaled = scaled.masked_fill(scaled < scaled.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
        theirs = torch.multinomial(softmax(scaled), 1, generator=torch.Generator().manual_seed(2)).squeeze(-1)
        assert torch.equal(ours, theirs)


def _host_reads(fn) -> int:
    """How many times `fn` reads a tensor's value back to the host (what waits for a GPU), kernels' own reads
    included (torch.multinomial's two checks, say), as PyTorch's profiler records them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return sum(event.name == "aten::_local_scalar_dense" for event in profile.events())


@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (0.8, None), (0.8, 5)])
def test_generation_reads_nothing_back_per_token(temperature, top_k):
    """Each read of a GPU value waits for the GPU. next_token reads nothing; generate reads the prompt's id range
    and, at the end, whether every step's logits were finite: as many reads for 2 tokens as for 8."""
    assert _host_reads(lambda: next_token(torch.randn(8, V), temperature, top_k)) == 0
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    prompt = torch.zeros(2, 3, dtype=torch.long)
    reads = [_host_reads(lambda n=n: generate(model, prompt, n, temperature, top_k)) for n in (2, 8)]
    assert reads[0] == reads[1] == 3


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_from_logits_that_are_not_finite_is_refused(gen, temperature):
    """multinomial refused nan probabilities when sampling, and argmax gave a token in silence when greedy."""
    model = _model("learned")
    with torch.no_grad():
        model.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(ValueError, match=r"^the model gave logits that are nan or \+inf, or -inf for every token"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), 3, temperature=temperature, generator=gen)


@pytest.mark.parametrize("static", [False, True])
def test_probabilities_a_sampling_softmax_kernel_makes_nan_are_refused_at_the_end(gen, static):
    """A sampling_softmax kernel turning top-k's -inf rows into nan drew token 0 from them in silence (argmax of nan
    over Exp(1) draws): `gpt-train sample --top-k 2` printed wrong tokens. The same read at the end refuses them."""
    model = GPT(_model("learned").config, dataclasses.replace(DEFAULT_KERNELS, sampling_softmax=online_softmax))
    model = _sharpen(model.double().eval(), gen)
    prompt = torch.zeros(2, 3, dtype=torch.long)
    said = r"^the model's sampling_softmax kernel gave probabilities that are nan or infinite, its logits finite"
    with pytest.raises(ValueError, match=said):
        generate(model, prompt, 4, temperature=1.0, top_k=2, generator=gen, static=static)
    assert generate(model, prompt, 4, temperature=1.0, generator=gen, static=static).shape == (2, 7)  # no -inf
    assert generate(model, prompt, 4, temperature=0.0, top_k=2, static=static).shape == (2, 7)  # greedy: no softmax


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_token_banned_by_a_logit_of_minus_inf_is_never_generated_and_all_banned_is_refused(gen, temperature):
    model = _sharpen(_model("learned"), gen)
    prompt = torch.zeros(4, 2, dtype=torch.long)
    free = generate(model, prompt, 6, temperature=temperature, generator=torch.Generator().manual_seed(0))
    favourite = int(free[:, 2:].flatten().mode().values)

    def ban(logits, name):
        return logits.index_fill(-1, torch.tensor([favourite]), float("-inf"))

    with model.hooks({"logits": ban}):
        banned = generate(model, prompt, 6, temperature=temperature, generator=torch.Generator().manual_seed(0))
    assert favourite in free[:, 2:] and favourite not in banned[:, 2:]
    every_token_banned = model.hooks({"logits": lambda logits, name: torch.full_like(logits, float("-inf"))})
    with every_token_banned, pytest.raises(ValueError, match="or -inf for every token"):
        generate(model, prompt, 2, temperature=temperature)


def test_slide_continues_past_block_size_with_learned_positions():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    prompt = torch.randint(V, (2, 3))
    out = generate(model, prompt, 20, temperature=0.0, slide=True)
    assert out.shape == (2, 23)
    assert torch.equal(out[:, :3], prompt)
    # the first block is exactly what plain generation gives; then the window restarts
    assert torch.equal(out[:, :9], generate(model, prompt, 20, temperature=0.0))
    restart = out[:, 9 - 4 : 9]  # block_size // 2 = 4 tokens of context
    assert torch.equal(out[:, 9:14], generate(model, restart, 5, temperature=0.0)[:, 4:])
    assert torch.equal(out, generate(model, prompt, 20, temperature=0.0, slide=True, use_cache=False))


def test_slide_runs_on_past_max_positions_with_randomized_rope_positions():
    """Only learned positions slid: a randomized rope model stopped with "needs 42 positions"."""
    config = GPTConfig(V, block_size=8, n_layer=1, n_head=2, n_embd=16, pos="rope", randomized_positions=True,
                       max_positions=16)  # fmt: skip
    model, prompt = GPT(config).eval(), torch.randint(V, (2, 3), generator=torch.Generator().manual_seed(0))
    out = generate(model, prompt, 40, temperature=0.0, generator=torch.Generator().manual_seed(1), slide=True)
    assert out.shape == (2, 43) and torch.equal(out[:, :3], prompt)
    assert generate(model, prompt, 40, temperature=0.0, generator=torch.Generator().manual_seed(1)).shape == (2, 17)


def test_a_prompt_longer_than_the_block_gives_its_first_token_a_whole_block_of_context():
    """It was cut to half a block: two prompts alike in their last half block continued alike."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    prompt = torch.randint(V, (2, 20))
    out = generate(model, prompt, 6, temperature=0.0, slide=True)
    assert torch.equal(out[:, 20], model(prompt[:, -8:]).logits[:, -1].argmax(dim=-1))
    assert torch.equal(out[:, 21:], generate(model, out[:, 17:21], 5, temperature=0.0)[:, 4:])  # then half blocks


@pytest.mark.parametrize(
    ("idx", "n", "words"),
    [
        (torch.zeros(1, 2), 3, "token ids as int64 (or int32), got torch.float32"),
        (torch.zeros(1, 2, dtype=torch.int16), 3, "token ids as int64 (or int32), got torch.int16"),
        (torch.tensor([[0, V]]), 3, f"ids from 0 to {V}; the vocabulary has 0 to {V - 1}"),
        (torch.tensor([[-1, 2]]), 3, "ids from -1 to 2"),
        (torch.tensor([[1, 2]]), 2.5, "max_new_tokens must be an int >= 0, got 2.5"),
    ],
    ids=["float ids", "int16 ids", "id past the vocabulary", "negative id", "fractional count"],
)
def test_generate_refuses_what_is_not_token_ids_in_one_sentence(idx, n, words):
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    with pytest.raises(ValueError, match=re.escape(words)):
        generate(model, idx, n)


def test_generated_ids_keep_the_prompts_integer_type():
    model = GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()
    assert generate(model, torch.tensor([[1, 2]]), torch.tensor(3), temperature=0.0).shape == (1, 5)  # any integer
    for n in (0, 3):
        assert generate(model, torch.tensor([[1, 2]], dtype=torch.int32), n, temperature=0.0).dtype == torch.int32


def test_slide_with_a_block_of_one_token_continues_from_the_last_token_alone():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=1, n_layer=1, n_head=2, n_embd=16)).eval()  # a bigram model
    prompt = torch.randint(V, (2, 3))
    out = generate(model, prompt, 5, temperature=0.0, slide=True)
    assert out.shape == (2, 8) and torch.equal(out[:, :3], prompt)
    for t in range(3, 8):
        assert torch.equal(out[:, t], model(out[:, t - 1 : t]).logits[:, -1].argmax(dim=-1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_cached_and_uncached_greedy_agree_on_cuda(pos):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=32, n_layer=2, n_head=2, n_embd=32, pos=pos)).cuda().eval()
    prompt = torch.randint(V, (4, 5), device="cuda")
    assert torch.equal(generate(model, prompt, 20, temperature=0.0), generate(model, prompt, 20, 0.0, use_cache=False))
