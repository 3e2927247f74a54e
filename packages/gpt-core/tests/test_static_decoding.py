"""The static decoding step (`gpt_core.decode`): the tokens and logits of the model's own cached path, from steps
whose shapes never change, with nothing read back to the host, and on CUDA captured once as a graph and replayed."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from gpt_core import GPT, GPTConfig, KVCache, generate
from gpt_core.decode import StaticDecoder, static_step_refusal
from gpt_core.testing.compiled import GraphCounter

V = 17
BLOCK = 16

# (pos, randomized_positions): every way a position reaches the step
POSITIONS = [("learned", False), ("rope", False), ("none", False), ("learned", True), ("rope", True)]
POSITION_IDS = [f"{pos}{'-randomized' if randomized else ''}" for pos, randomized in POSITIONS]


def _model(pos: str, randomized: bool, dtype=torch.float32, device="cpu") -> GPT:
    extra = {"max_positions": 2 * BLOCK, "randomized_positions": True} if randomized else {}
    config = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, pos=pos, **extra)
    return GPT(config).to(device=device, dtype=dtype).eval()


def _sharpen(model: GPT, gen: torch.Generator) -> GPT:
    """Larger random weights, so the logits have clear preferences (not near-uniform)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device) * 0.3)
    return model


def _decode(model: GPT, prompt: torch.Tensor, n_new: int, **kwargs) -> torch.Tensor:
    """Greedy, or sampled with a fresh generator seeded 3 (the same draws for every path) when temperature > 0."""
    generator = torch.Generator(device=prompt.device).manual_seed(3)
    kwargs.setdefault("temperature", 0.0)
    return generate(model, prompt, n_new, generator=generator, **kwargs)


# ----------------------------------------------------------------------------- tokens, through generate


@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
@pytest.mark.parametrize("prompt_length", [1, 5])
def test_static_greedy_decoding_gives_the_cached_and_the_uncached_tokens_up_to_a_full_block(
    gen, pos, randomized, prompt_length
):
    model = _model(pos, randomized)
    prompt = torch.randint(V, (3, prompt_length), generator=gen)
    n_new = BLOCK + 1 - prompt_length  # learned positions: the last token is predicted from one full block
    static = _decode(model, prompt, n_new, static=True)
    assert static.shape == (3, BLOCK + 1)
    assert torch.equal(static, _decode(model, prompt, n_new, static=False))
    assert torch.equal(static, _decode(model, prompt, n_new, use_cache=False))


@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
@pytest.mark.parametrize("prompt_length", [1, 4])
def test_static_sampling_with_the_same_generator_gives_the_cached_and_the_uncached_tokens(
    gen, pos, randomized, prompt_length
):
    model = _sharpen(_model(pos, randomized), gen)
    prompt = torch.randint(V, (4, prompt_length), generator=gen)
    static = _decode(model, prompt, 10, temperature=0.9, top_k=8, static=True)
    assert torch.equal(static, _decode(model, prompt, 10, temperature=0.9, top_k=8, static=False))
    assert torch.equal(static, _decode(model, prompt, 10, temperature=0.9, top_k=8, use_cache=False))


def test_static_decoding_slides_past_the_block_like_the_cached_path(gen):
    model = _model("learned", False)
    prompt = torch.randint(V, (2, 3), generator=gen)
    static = _decode(model, prompt, 40, static=True, slide=True)
    assert static.shape == (2, 43)
    assert torch.equal(static, _decode(model, prompt, 40, static=False, slide=True))


# ----------------------------------------------------------------------------- logits, step by step


def _stepwise(model: GPT, idx: torch.Tensor, prompt_length: int, positions: torch.Tensor | None):
    """The logits of every position of idx (B, T) from the static step and from the model's cached forward."""
    B, T = idx.shape
    decoder = StaticDecoder(model, B, T, positions)
    cache = model.new_cache(B, T)
    given = None if positions is None else positions[:, :prompt_length]
    with torch.no_grad():
        static = [decoder.prefill(idx[:, :prompt_length])]
        dynamic = [model(idx[:, :prompt_length], cache=cache, positions=given).logits]
        for t in range(prompt_length, T):
            here = None if positions is None else positions[:, t : t + 1]
            static.append(decoder.step(idx[:, t : t + 1]).clone())
            dynamic.append(model(idx[:, t : t + 1], cache=cache, positions=here).logits)
    return torch.cat(static, dim=1), torch.cat(dynamic, dim=1)


@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
def test_static_step_logits_equal_the_cached_steps_in_float64(gen, close, pos, randomized):
    model = _sharpen(_model(pos, randomized, torch.float64), gen)
    idx = torch.randint(V, (3, BLOCK), generator=gen)
    positions = model.sample_positions(3, BLOCK, gen) if randomized else None
    static, dynamic = _stepwise(model, idx, 3, positions)
    close(f"static step vs cached step ({pos})", static, dynamic, 1e-12)


def test_static_step_logits_with_the_reference_kernels_equal_the_cached_steps(gen, close):
    from gpt_core import REFERENCE_KERNELS

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, pos="rope")
    model = _sharpen(GPT(config, REFERENCE_KERNELS).double().eval(), gen)
    static, dynamic = _stepwise(model, torch.randint(V, (2, BLOCK), generator=gen), 1, None)
    close("static step vs cached step (reference set)", static, dynamic, 1e-12)


def test_static_step_logits_equal_the_cached_steps_without_layernorm_residual_or_mlp(gen, close):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, layernorm=False, mlp=False)
    model = _sharpen(GPT(config).double().eval(), gen)
    static, dynamic = _stepwise(model, torch.randint(V, (2, BLOCK), generator=gen), 2, None)
    close("static step vs cached step (ablations)", static, dynamic, 1e-12)
    config = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=16, residual=False)
    model = _sharpen(GPT(config).double().eval(), gen)
    static, dynamic = _stepwise(model, torch.randint(V, (2, BLOCK), generator=gen), 2, None)
    close("static step vs cached step (ablations)", static, dynamic, 1e-12)


# ----------------------------------------------------------------------------- fixed shapes, no host reads


def _shapes(values) -> tuple:
    out = []
    for value in values:
        if isinstance(value, torch.Tensor):
            out.append((tuple(value.shape), value.dtype))
        elif isinstance(value, (list, tuple)):
            out.append(_shapes(value))
    return tuple(out)


class OperationLog(TorchFunctionMode):
    """Records every torch operation: its name and the shapes and dtypes of its tensor inputs and outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.operations: list[tuple] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__qualname__", getattr(func, "__name__", repr(func)))
        self.operations.append((name, _shapes(args), _shapes(kwargs.values()), _shapes([out])))
        return out


def _logged_steps(step, tokens: torch.Tensor) -> list[list[tuple]]:
    logs = []
    with torch.no_grad():
        for t in range(tokens.shape[1]):
            with OperationLog() as log:
                step(tokens[:, t : t + 1])
            logs.append(log.operations)
    return logs


@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
def test_every_static_step_runs_the_same_operations_on_the_same_shapes(gen, pos, randomized):
    model = _model(pos, randomized)
    positions = model.sample_positions(2, BLOCK, gen) if randomized else None
    decoder = StaticDecoder(model, 2, BLOCK, positions)
    with torch.no_grad():
        decoder.prefill(torch.randint(V, (2, 3), generator=gen))
    logs = _logged_steps(decoder.step, torch.randint(V, (2, BLOCK - 3), generator=gen))
    assert len(logs[0]) > 20
    assert all(log == logs[0] for log in logs[1:])


def test_the_operation_log_sees_the_cached_forwards_shapes_change(gen):
    """The control: the model's own cached step attends over one more key each time, which the log sees."""
    model = _model("rope", False)
    cache = model.new_cache(2, BLOCK)
    with torch.no_grad():
        model(torch.randint(V, (2, 3), generator=gen), cache=cache)
    logs = _logged_steps(lambda token: model(token, cache=cache), torch.randint(V, (2, 4), generator=gen))
    assert logs[1] != logs[0]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(("pos", "randomized"), [POSITIONS[0], POSITIONS[-1]], ids=[POSITION_IDS[0], POSITION_IDS[-1]])
def test_the_static_step_traces_as_one_graph_with_no_host_read_and_never_recompiles(gen, close, pos, randomized):
    """fullgraph=True fails on any graph break, and a read back to the host (`.item()`, a data-dependent shape or
    branch) is one; a shape that changed between steps would be a second graph."""
    model = _model(pos, randomized, torch.float64)
    positions = model.sample_positions(2, BLOCK, gen) if randomized else None
    eager, traced = StaticDecoder(model, 2, BLOCK, positions), StaticDecoder(model, 2, BLOCK, positions)
    counter = GraphCounter()
    traced._step = torch.compile(traced._step, backend=counter, fullgraph=True, dynamic=False)
    prompt, tokens = torch.randint(V, (2, 2), generator=gen), torch.randint(V, (2, 8), generator=gen)
    with torch.no_grad():
        eager.prefill(prompt)
        traced.prefill(prompt)
        for t in range(tokens.shape[1]):
            token = tokens[:, t : t + 1]
            close("static step traced vs eager", traced.step(token), eager.step(token), 1e-12)
    assert counter.graphs == 1


# ----------------------------------------------------------------------------- the cache write, the refusals


def test_kv_cache_write_puts_one_step_at_a_device_position_and_returns_every_slot():
    cache = KVCache(n_layer=2, batch_size=1, n_head=1, head_dim=2, max_length=4, device="cpu", dtype=torch.float64)
    keys, values = cache.write(1, torch.ones(1, 1, 1, 2), 2 * torch.ones(1, 1, 1, 2), torch.tensor([2]))
    assert keys.shape == values.shape == (1, 1, 4, 2) and keys.dtype == torch.float64
    assert keys[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert values[0, 0, :, 1].tolist() == [0.0, 0.0, 2.0, 0.0]
    assert torch.equal(cache.keys[1], keys) and not cache.keys[0].any()  # a view of its layer; the other untouched
    assert cache.length == 0


def test_a_static_step_past_the_cache_raises_a_clear_error_before_writing(gen):
    decoder = StaticDecoder(_model("rope", False), 1, 4)
    with torch.no_grad():
        decoder.prefill(torch.randint(V, (1, 3), generator=gen))
        decoder.step(torch.randint(V, (1, 1), generator=gen))
        assert decoder.cache.length == 4 and int(decoder.at) == 4
        with pytest.raises(ValueError, match=r"KV cache is full: 5 positions needed, 4 allocated"):
            decoder.step(torch.randint(V, (1, 1), generator=gen))


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_a_prompt_prefilled_in_parts_then_stepped_equals_the_full_forward(gen, close, pos):
    model = _model(pos, False, torch.float64)
    idx = torch.randint(V, (2, 6), generator=gen)
    decoder = StaticDecoder(model, 2, BLOCK)
    with torch.no_grad():
        full = model(idx).logits
        parts = [decoder.prefill(idx[:, :3]), decoder.prefill(idx[:, 3:5]), decoder.step(idx[:, 5:6])]
    close(f"static step after a prefill in parts ({pos})", torch.cat(parts, dim=1), full, 1e-12)


def test_a_static_decoder_refuses_a_cache_past_the_models_positions_and_steps_of_another_shape(gen):
    with pytest.raises(ValueError, match=rf"^the decoder's cache needs {BLOCK + 1} positions, longer than block_size"):
        StaticDecoder(_model("learned", False), 1, BLOCK + 1)
    with pytest.raises(ValueError, match=r"^the decoder's cache needs 33 positions, more than max_positions 32"):
        StaticDecoder(_model("rope", True), 1, 2 * BLOCK + 1)
    decoder = StaticDecoder(_model("rope", False), 2, 8)
    with torch.no_grad():
        decoder.prefill(torch.randint(V, (2, 3), generator=gen))
        for token in (torch.zeros(1, 1, dtype=torch.long), torch.zeros(2, dtype=torch.long)):
            with pytest.raises(ValueError, match=r"^a step takes one token per row, \(2, 1\), got "):
                decoder.step(token)
        with pytest.raises(ValueError, match=r"^the KV cache holds 2 sequences, the input 1$"):
            decoder.prefill(torch.randint(V, (1, 2), generator=gen))
    assert decoder.cache.length == 3 and int(decoder.at) == 3  # nothing written by the refused calls


def test_a_hooked_model_refuses_the_static_step_and_generate_says_why(gen):
    model = _model("rope", False)
    prompt = torch.randint(V, (1, 2), generator=gen)
    assert static_step_refusal(model) is None
    with model.hooks({"blocks.0.q": lambda x, name: None}):
        assert "fires no hooks" in static_step_refusal(model)
        with pytest.raises(ValueError, match="fires no hooks"):
            generate(model, prompt, 3, static=True)
        generate(model, prompt, 3)  # without static, the hooked cached path


def test_a_model_training_with_dropout_refuses_the_static_step(gen):
    config = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=1, n_head=2, n_embd=16, dropout=0.1)
    model = GPT(config)
    assert "applies no dropout" in static_step_refusal(model)
    assert static_step_refusal(model.eval()) is None


def test_static_decoding_without_the_cache_is_refused(gen):
    with pytest.raises(ValueError, match="static=True decodes with the KV cache"):
        generate(_model("rope", False), torch.randint(V, (1, 2), generator=gen), 3, static=True, use_cache=False)


def test_a_cuda_graph_needs_a_cuda_model():
    with pytest.raises(ValueError, match="a CUDA graph needs a model on a CUDA device, not cpu"):
        StaticDecoder(_model("rope", False), 1, 4, graph=True)


# ----------------------------------------------------------------------------- the CUDA graph

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@cuda_only
@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
@pytest.mark.parametrize("prompt_length", [1, BLOCK - 2])
def test_cuda_graph_decoding_gives_the_cached_and_the_uncached_tokens_on_cuda(pos, randomized, prompt_length):
    torch.manual_seed(0)
    model = _model(pos, randomized, device="cuda")
    prompt = torch.randint(V, (8, prompt_length), device="cuda")
    n_new = BLOCK + 1 - prompt_length
    for options in ({}, {"temperature": 0.9, "top_k": 8}):
        graphed = _decode(model, prompt, n_new, static=True, **options)
        assert torch.equal(graphed, _decode(model, prompt, n_new, static=False, **options))
        assert torch.equal(graphed, _decode(model, prompt, n_new, use_cache=False, **options))


@cuda_only
@pytest.mark.parametrize(("pos", "randomized"), POSITIONS, ids=POSITION_IDS)
def test_cuda_graph_replays_give_the_cached_steps_logits_in_float64_on_cuda(close, pos, randomized):
    gen = torch.Generator().manual_seed(5)
    model = _sharpen(_model(pos, randomized, torch.float64, device="cuda"), gen)
    idx = torch.randint(V, (3, BLOCK), generator=gen).cuda()
    positions = model.sample_positions(3, BLOCK, torch.Generator(device="cuda").manual_seed(1)) if randomized else None
    decoder = StaticDecoder(model, 3, BLOCK, positions, graph=True)
    cache = model.new_cache(3, BLOCK)
    with torch.no_grad():
        given = None if positions is None else positions[:, :2]
        prefilled = decoder.prefill(idx[:, :2])
        close(
            "CUDA graph vs cached (prefill)", prefilled, model(idx[:, :2], cache=cache, positions=given).logits, 1e-12
        )
        for t in range(2, BLOCK):
            here = None if positions is None else positions[:, t : t + 1]
            replayed = decoder.step(idx[:, t : t + 1]).clone()
            cached = model(idx[:, t : t + 1], cache=cache, positions=here).logits
            close("CUDA graph vs cached step", replayed, cached, 1e-12)
    assert decoder.recorded is not None


@cuda_only
def test_a_hooked_model_on_cuda_decodes_by_the_cached_forward_and_fires_its_hooks():
    torch.manual_seed(0)
    model = _model("rope", False, device="cuda")
    prompt = torch.randint(V, (2, 3), device="cuda")
    seen = []
    with model.hooks({"blocks.0.q": lambda x, name: seen.append(x.shape[-2])}):
        hooked = _decode(model, prompt, 5)
    assert seen == [3, 1, 1, 1, 1]
    assert torch.equal(hooked, _decode(model, prompt, 5))
