"""Hook points: reading and replacing every activation of the forward, full and KV-cached.

What is pinned: identity hooks change no bit; zeroing a head's z is zeroing its projection columns;
every recorded activation is the quantity recomputed by hand from the weights with PyTorch's
built-ins; replacing hooks act the same on cached and uncached decoding and carry gradients; bad
names and bad replacements are one-line errors; and no hook outlives its with-block.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from gpt_core import BLOCK_POINTS, GPT, KERNEL_SETS, REFERENCE_KERNELS, GPTConfig, Kernels, block_hook, generate

V = 13
N_LAYER, N_HEAD, N_EMBD = 2, 4, 16
HEAD_DIM = N_EMBD // N_HEAD


def _model(pos: str = "learned", dtype: torch.dtype = torch.float64, kernels: Kernels = KERNEL_SETS["fast"],
           **overrides) -> GPT:  # fmt: skip
    config = GPTConfig(vocab_size=V, block_size=16, n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, pos=pos, **overrides)
    model = GPT(config, kernels).to(dtype).eval()
    _sharpen(model)
    return model


def _sharpen(model: GPT) -> None:
    """Random weights large enough that attention is far from uniform and LayerNorm's affine parts matter."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * (0.4 if p.dim() > 1 else 0.2))
            if ".ln" in f".{name}" and name.endswith("weight"):
                p.add_(1.0)


def _tokens(gen: torch.Generator, batch: int = 3, length: int = 9) -> torch.Tensor:
    return torch.randint(V, (batch, length), generator=gen)


def _keep(activation: torch.Tensor, name: str) -> None:
    return None


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_hook_names_are_every_point_in_the_order_the_forward_fires_them(gen, pos):
    model = _model(pos)
    names = model.hook_names()
    blocks = [block_hook(layer, point) for layer in range(N_LAYER) for point in BLOCK_POINTS]
    embeddings = ["embed", "pos_embed"] if pos == "learned" else ["embed"]
    assert names == [*embeddings, *blocks, "ln_final", "logits"]
    fired = []
    with model.hooks({name: lambda a, n: fired.append(n) for name in names}):
        model(_tokens(gen))
    assert fired == names


def test_hook_names_of_a_model_without_layernorm_or_residual_are_the_same_points():
    """The ablations keep every point: ln1 is then the identity's output, resid_mid the branch alone."""
    assert _model(layernorm=False, residual=False).hook_names() == _model().hook_names()


def test_an_attention_only_model_has_no_mlp_points_and_its_resid_post_is_its_resid_mid(gen):
    model = _model(mlp=False)
    mlp_points = {block_hook(layer, p) for layer in range(N_LAYER) for p in ("ln2", "mlp_hidden", "mlp_out")}
    assert model.hook_names() == [name for name in _model().hook_names() if name not in mlp_points]
    fired = []
    with model.hooks({name: lambda a, n: fired.append(n) for name in model.hook_names()}):
        model(_tokens(gen))
    assert fired == model.hook_names()
    _, cache = model.run_with_cache(_tokens(gen))
    for layer in range(N_LAYER):
        assert torch.equal(cache[block_hook(layer, "resid_post")], cache[block_hook(layer, "resid_mid")])
    with pytest.raises(ValueError, match="unknown hook name 'blocks.0.mlp_out'"):
        model.hooks({"blocks.0.mlp_out": _keep}).__enter__()


# ----------------------------------------------------------------------------- identity hooks


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_identity_hooks_on_every_name_give_bit_identical_logits_and_loss(gen, pos, dtype, grad):
    """Every point hooked (pattern included, which switches attention to its plain differentiable
    form), each hook returning None: not one bit of the logits or the loss moves."""
    model = _model(pos, dtype)
    idx = _tokens(gen)
    with torch.set_grad_enabled(grad):
        plain = model(idx, targets=idx)
        with model.hooks(dict.fromkeys(model.hook_names(), _keep)):
            hooked = model(idx, targets=idx)
    assert torch.equal(hooked.logits, plain.logits)
    assert torch.equal(hooked.loss, plain.loss)


def test_hooks_that_return_the_activation_itself_give_bit_identical_logits(gen):
    model = _model(dtype=torch.float32)
    idx = _tokens(gen)
    with model.hooks(dict.fromkeys(model.hook_names(), lambda a, n: a)):
        hooked = model(idx).logits
    assert torch.equal(hooked, model(idx).logits)


@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_identity_hooks_keep_every_gradient(gen, close, kernels):
    """The pattern hook's attention, its weights times v, is differentiated by autograd, not by the fused
    kernel's hand-derived backward: the same gradients to rounding."""
    model = _model(kernels=KERNEL_SETS[kernels])
    idx = _tokens(gen)
    model(idx, targets=idx).loss.backward()
    plain = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    with model.hooks(dict.fromkeys(model.hook_names(), _keep)):
        model(idx, targets=idx).loss.backward()
    for name, p in model.named_parameters():
        close("identity hooks: gradient", p.grad, plain[name], 1e-12)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_identity_hooks_leave_greedy_generation_unchanged(gen, pos, use_cache):
    model = _model(pos, torch.float32)
    prompt = _tokens(gen, batch=2, length=4)
    plain = generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=use_cache)
    with model.hooks(dict.fromkeys(model.hook_names(), _keep)):
        hooked = generate(model, prompt, max_new_tokens=8, temperature=0.0, use_cache=use_cache)
    assert torch.equal(hooked, plain)


# ----------------------------------------------------------------------------- head ablation


def _zero_head(head: int):
    def hook(z: torch.Tensor, name: str) -> torch.Tensor:  # z (B, H, T, d)
        mask = torch.ones(z.shape[1], 1, 1, dtype=z.dtype)
        mask[head] = 0
        return z * mask

    return hook


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (0, 3), (1, 2)])
def test_zeroing_a_heads_z_equals_zeroing_its_projection_columns(gen, close, layer, head):
    model = _model()
    idx = _tokens(gen)
    ablated = copy.deepcopy(model)
    with torch.no_grad():
        ablated.blocks[layer].attn.proj.weight[:, head * HEAD_DIM : (head + 1) * HEAD_DIM] = 0
    with model.hooks({block_hook(layer, "z"): _zero_head(head)}):
        hooked = model(idx, targets=idx)
    expected = ablated(idx, targets=idx)
    close("zeroed z vs zeroed projection columns", hooked.logits, expected.logits, 1e-12)
    assert (hooked.logits - model(idx).logits).abs().max() > 1e-3  # the head mattered: the test could fail
    hooked.loss.backward()
    expected.loss.backward()
    columns = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
    for (name, ours), theirs in zip(model.named_parameters(), ablated.parameters(), strict=True):
        grad, expected_grad = ours.grad.clone(), theirs.grad.clone()
        if name == f"blocks.{layer}.attn.proj.weight":  # the hook's zeros reach no weight; the copy's are weights
            assert torch.count_nonzero(grad[:, columns]) == 0
            expected_grad[:, columns] = 0
        close("zeroed z vs zeroed projection columns: gradient", grad, expected_grad, 1e-12)


# ----------------------------------------------------------------------------- run_with_cache


def _by_hand(model: GPT, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every activation recomputed from the weights with PyTorch's built-ins (learned positions)."""
    B, T = idx.shape
    ln = lambda x, norm: F.layer_norm(x, (N_EMBD,), norm.weight, norm.bias, norm.eps)  # noqa: E731
    linear = lambda x, layer: F.linear(x, layer.weight, layer.bias)  # noqa: E731
    heads = lambda x: x.view(B, T, N_HEAD, HEAD_DIM).transpose(1, 2)  # noqa: E731  (B, H, T, d)
    out = {"embed": F.embedding(idx, model.wte.weight), "pos_embed": model.wpe.weight[:T]}
    resid = out["embed"] + out["pos_embed"]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i, block in enumerate(model.blocks):
        a = {"resid_pre": resid, "ln1": ln(resid, block.ln1)}
        a["q"], a["k"], a["v"] = (heads(part) for part in linear(a["ln1"], block.attn.qkv).split(N_EMBD, dim=-1))
        scores = (a["q"] @ a["k"].transpose(-2, -1) / math.sqrt(HEAD_DIM)).masked_fill(future, -math.inf)
        a["pattern"] = torch.softmax(scores, dim=-1)
        a["z"] = a["pattern"] @ a["v"]
        a["attn_out"] = linear(a["z"].transpose(1, 2).reshape(B, T, N_EMBD), block.attn.proj)
        a["resid_mid"] = resid + a["attn_out"]
        a["ln2"] = ln(a["resid_mid"], block.ln2)
        a["mlp_hidden"] = F.gelu(linear(a["ln2"], block.mlp.fc), approximate="tanh")
        a["mlp_out"] = linear(a["mlp_hidden"], block.mlp.proj)
        resid = a["resid_post"] = a["resid_mid"] + a["mlp_out"]
        out |= {block_hook(i, point): value for point, value in a.items()}
    out["ln_final"] = ln(resid, model.ln_f)
    out["logits"] = out["ln_final"] @ model.wte.weight.T  # tied head
    return out


def test_run_with_cache_gives_every_activation_recomputed_by_hand(gen, close):
    model = _model()
    idx = _tokens(gen)
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx)
        expected = _by_hand(model, idx)
    assert list(cache) == model.hook_names() == list(expected)
    for name, value in expected.items():
        close(f"run_with_cache {name.split('.')[-1]}", cache[name], value, 1e-12)
    assert torch.equal(logits, cache["logits"])


def test_run_with_cache_q_and_k_are_after_rope(gen, close):
    model = _model("rope")
    idx = _tokens(gen)
    _, cache = model.run_with_cache(idx, names=["blocks.1.ln1", "blocks.1.q", "blocks.1.k"])
    attn = model.blocks[1].attn
    qkv = F.linear(cache["blocks.1.ln1"], attn.qkv.weight, attn.qkv.bias).view(3, 9, 3, N_HEAD, HEAD_DIM)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)  # (B, H, T, d)
    close("run_with_cache q after rope", cache["blocks.1.q"], attn.rope(q), 1e-12)
    close("run_with_cache k after rope", cache["blocks.1.k"], attn.rope(k), 1e-12)


def test_run_with_cache_returns_only_the_names_asked_for_detached_in_forward_order(gen):
    model = _model()
    idx = _tokens(gen)
    logits, cache = model.run_with_cache(idx, names=["logits", "blocks.1.z", "embed"], targets=idx)
    assert list(cache) == ["embed", "blocks.1.z", "logits"]
    assert all(not t.requires_grad for t in cache.values())
    assert logits.requires_grad  # the logits themselves are the forward's, in the caller's grad mode
    assert cache["blocks.1.z"].shape == (3, N_HEAD, 9, HEAD_DIM)


@pytest.mark.parametrize("kernels", ["fast", "reference"])
def test_the_pattern_is_the_weights_function_of_the_models_own_kernel_set(gen, kernels):
    """The weights a model shows come from its kernel set's `attention_weights`, bit for bit, and its z is
    them times v: the reference set's weights are not the fast set's arithmetic (they differ in the last
    bits), so a model never shows another set's."""
    own = KERNEL_SETS[kernels]
    other = KERNEL_SETS["fast" if kernels == "reference" else "reference"]
    model = _model("rope", kernels=own)
    with torch.no_grad():
        _, cache = model.run_with_cache(_tokens(gen))
    differs = []
    for i in range(N_LAYER):
        q, k, v, pattern = (cache[block_hook(i, name)] for name in ("q", "k", "v", "pattern"))
        assert torch.equal(pattern, own.attention_weights(q, k, True))
        assert torch.equal(cache[block_hook(i, "z")], pattern @ v)
        differs.append(not torch.equal(pattern, other.attention_weights(q, k, True)))
    assert any(differs)


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_hooking_the_reference_sets_pattern_changes_not_one_bit(gen, pos, grad):
    """The reference attention is its weights times v: hooked at `pattern`, the reference model gives its
    unhooked logits and loss bit for bit, cached or not."""
    model = _model(pos, kernels=REFERENCE_KERNELS)
    idx = _tokens(gen)
    patterns = [name for name in model.hook_names() if name.endswith(".pattern")]
    with torch.set_grad_enabled(grad):
        plain = model(idx, targets=idx)
        plain_steps = _cached_logits(model, idx, [(0, 4), (4, 5), (5, 9)])
        with model.hooks(dict.fromkeys(patterns, _keep)):
            hooked = model(idx, targets=idx)
            hooked_steps = _cached_logits(model, idx, [(0, 4), (4, 5), (5, 9)])
    assert torch.equal(hooked.logits, plain.logits) and torch.equal(hooked.loss, plain.loss)
    assert torch.equal(hooked_steps, plain_steps)


# ----------------------------------------------------------------------------- the KV cache


def _replacing_hooks() -> dict:
    """Edits that act on each position alone, so cached and uncached decoding must agree under them."""

    def sharpen_pattern(p: torch.Tensor, name: str) -> torch.Tensor:
        squared = p.square()
        return squared / squared.sum(dim=-1, keepdim=True)

    return {
        "blocks.0.k": lambda k, n: k * 1.5,
        "blocks.0.v": lambda v, n: v.flip(-1),
        "blocks.1.pattern": sharpen_pattern,
        "blocks.1.z": _zero_head(1),
        "blocks.0.mlp_hidden": lambda h, n: h.clamp(max=0.5),
        "blocks.1.resid_mid": lambda x, n: x * 0.5,
    }


def _cached_logits(model: GPT, idx: torch.Tensor, chunks: list[tuple[int, int]]) -> torch.Tensor:
    cache = model.new_cache(idx.shape[0], idx.shape[1])
    return torch.cat([model(idx[:, a:b], cache=cache).logits for a, b in chunks], dim=1)


def test_hook_offset_is_where_each_call_starts_whatever_its_length(gen):
    """A hook sees only the call's new positions; `hook_offset` places them: 0 for a full forward, the KV
    cache's filled length for a cached call, a one-token prompt and a prefill after a prefix alike. Set
    for the logits too (after the cache advanced) and while only mlp_hidden (a PyTorch hook) is set."""
    model = _model()
    idx = _tokens(gen, batch=2)
    seen = []

    def record(activation: torch.Tensor, name: str) -> None:
        seen.append((name, model.hook_offset, activation.shape[-2]))

    for names in (["blocks.1.z", "logits"], ["blocks.0.mlp_hidden"]):
        seen.clear()
        with model.hooks(dict.fromkeys(names, record)):
            model(idx)
            cache = model.new_cache(2, 16)
            for start, end in ((0, 1), (1, 2), (2, 5), (5, 6)):  # a one-token prompt, a step, a prefill, a step
                model(idx[:, start:end], cache=cache)
        calls = [(0, 9), (0, 1), (1, 1), (2, 3), (5, 1)]
        assert seen == [(name, *call) for call in calls for name in names]


@pytest.mark.parametrize("pos", ["learned", "rope", "none"])
def test_replacing_hooks_give_the_same_logits_cached_and_uncached(gen, close, pos):
    model = _model(pos)
    idx = _tokens(gen, length=10)
    chunks = [(0, 4), (4, 5), (5, 8), (8, 9), (9, 10)]
    with torch.no_grad(), model.hooks(_replacing_hooks()):
        full = model(idx).logits
        cached = _cached_logits(model, idx, chunks)
    close(f"hooked: cached vs full ({pos})", cached, full, 1e-10)
    with torch.no_grad():
        assert (full - model(idx).logits).abs().max() > 1e-3  # the hooks did change the model


def test_replacing_hooks_change_greedy_cached_generation_as_uncached(gen):
    model = _model("rope", torch.float32)
    prompt = _tokens(gen, batch=4, length=3)
    with model.hooks(_replacing_hooks()):
        cached = generate(model, prompt, max_new_tokens=9, temperature=0.0, use_cache=True)
        uncached = generate(model, prompt, max_new_tokens=9, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert not torch.equal(cached, generate(model, prompt, max_new_tokens=9, temperature=0.0))


def test_run_with_cache_on_a_cached_step_sees_the_new_positions_against_all_keys(gen, close):
    """With a KV cache, q, k, v and z hold the step's new positions only, the pattern its rows over
    every key so far: the matching slices of the full forward's."""
    model = _model("rope")
    idx = _tokens(gen, length=7)
    with torch.no_grad():
        _, full = model.run_with_cache(idx)
        cache = model.new_cache(3, 7)
        model(idx[:, :5], cache=cache)
        _, step = model.run_with_cache(idx[:, 5:7], cache=cache)
    assert step["blocks.1.k"].shape == (3, N_HEAD, 2, HEAD_DIM)
    assert step["blocks.1.pattern"].shape == (3, N_HEAD, 2, 7)
    for name in model.hook_names():
        by_head = name.endswith((".q", ".k", ".v", ".pattern", ".z"))  # (B, H, T, *), else (B, T, *)
        expected = full[name][:, :, 5:7] if by_head else full[name][:, 5:7]
        close(f"cached step {name.split('.')[-1]}", step[name], expected, 1e-10)


# ----------------------------------------------------------------------------- gradients


def _loss_with_doubled_resid_mid(model: GPT, idx: torch.Tensor, layer: int) -> torch.Tensor:
    """The model's loss with block `layer`'s resid_mid doubled, by calling its modules in turn."""
    x = model.wte(idx) + model.wpe.weight[: idx.shape[1]]
    for i, block in enumerate(model.blocks):
        x = x + block.attn(block.ln1(x))
        x = 2 * x if i == layer else x
        x = x + block.mlp(block.ln2(x))
    return model.loss(model.lm_head(model.ln_f(x)), idx)


def test_gradients_flow_through_a_replacing_hook(gen, close):
    model = _model()
    idx = _tokens(gen)
    with model.hooks({"blocks.0.resid_mid": lambda x, n: 2 * x}):
        hooked = torch.autograd.grad(model(idx, targets=idx).loss, list(model.parameters()))
    expected = torch.autograd.grad(_loss_with_doubled_resid_mid(model, idx, 0), list(model.parameters()))
    plain = torch.autograd.grad(model(idx, targets=idx).loss, list(model.parameters()))
    for ours, theirs in zip(hooked, expected, strict=True):
        close("grad through doubled resid_mid", ours, theirs, 1e-12)
    assert max((h - p).abs().max() for h, p in zip(hooked, plain, strict=True)) > 1e-3


def test_a_replaced_pattern_carries_the_gradient_of_the_replacement(gen):
    """Uniform causal weights in place of layer 0's pattern: its queries and keys then reach nothing,
    so their weights get exactly zero gradient, while the values' do not."""

    def uniform(p: torch.Tensor, name: str) -> torch.Tensor:
        allowed = (p > 0).to(p.dtype)
        return allowed / allowed.sum(dim=-1, keepdim=True)

    model = _model()
    idx = _tokens(gen)
    qkv = model.blocks[0].attn.qkv.weight
    with model.hooks({"blocks.0.pattern": uniform}):
        (grad,) = torch.autograd.grad(model(idx, targets=idx).loss, [qkv])
    assert torch.count_nonzero(grad[: 2 * N_EMBD]) == 0  # rows of q and k
    assert grad[2 * N_EMBD :].abs().max() > 1e-3  # rows of v


# ----------------------------------------------------------------------------- a swapped-in kernel


def _builtin_attention(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def test_hooks_on_a_swapped_attention_kernel(gen, close):
    """z is the kernel's output; a pattern hook computes that layer's attention from the `attention_weights`
    slot instead, the fast set's where the swapped-in kernel brings none: the same logits to rounding."""
    model = _model("rope")
    swapped = GPT(model.config, Kernels(attention=_builtin_attention)).to(torch.float64).eval()
    swapped.load_state_dict(model.state_dict())
    idx = _tokens(gen)
    plain = swapped(idx).logits
    seen = []
    with swapped.hooks({"blocks.0.pattern": lambda p, n: seen.append(p), "blocks.1.z": _zero_head(0)}):
        hooked = swapped(idx).logits
    with model.hooks({"blocks.1.z": _zero_head(0)}):
        expected = model(idx).logits
    assert seen[0].shape == (3, N_HEAD, 9, 9)
    close("swapped kernel: hooked", hooked, expected, 1e-12)
    assert (hooked - plain).abs().max() > 1e-3


def test_a_hooked_pattern_is_computed_by_the_kernels_own_weights_function(gen, close):
    """A kernel table bringing its own weights function: the pattern hook sees what it returns, one call per
    layer per forward, cached or not, and its replacement reaches the output and the gradients."""
    model = _model("rope")
    calls = []

    def recorded_weights(q, k, causal):
        calls.append(q.shape[-2])
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
            ~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2]), -math.inf
        )
        return torch.softmax(scores, dim=-1)

    plugin = GPT(model.config, Kernels(attention=_builtin_attention, attention_weights=recorded_weights))
    plugin = plugin.to(torch.float64).eval()
    plugin.load_state_dict(model.state_dict())
    idx = _tokens(gen)
    seen = []
    with plugin.hooks({"blocks.0.pattern": lambda p, n: seen.append(p), "blocks.1.pattern": _keep}):
        hooked = plugin(idx, targets=idx)
        assert calls == [9, 9]
        _cached_logits(plugin, idx, [(0, 4), (4, 5)])
        assert calls == [9, 9, 4, 4, 1, 1]
    q, k = (plugin.run_with_cache(idx, ["blocks.0." + name])[1]["blocks.0." + name] for name in ("q", "k"))
    assert torch.equal(seen[0], recorded_weights(q, k, True))
    close("own weights function: hooked", hooked.logits, plugin(idx).logits, 1e-12)
    hooked.loss.backward()
    assert all(p.grad is not None for p in plugin.parameters())


# ----------------------------------------------------------------------------- bad input, cleanup


@pytest.mark.parametrize(
    ("pos", "name"), [("learned", "blocks.2.z"), ("learned", "blocks.0.attn"), ("rope", "pos_embed")]
)
def test_an_unknown_hook_name_is_a_one_line_value_error_and_sets_nothing(gen, pos, name):
    model = _model(pos)
    fired = []
    hooks = {"blocks.0.z": lambda a, n: fired.append(n), name: _keep}
    for attempt in (lambda: model.hooks(hooks).__enter__(), lambda: model.run_with_cache(_tokens(gen), [name])):
        with pytest.raises(ValueError, match=r"unknown hook name .*GPT\.hook_names\(\)") as error:
            attempt()
        assert name in str(error.value) and "\n" not in str(error.value)
    model(_tokens(gen))
    assert fired == []


def test_a_hook_that_is_not_callable_or_not_in_a_mapping_is_a_value_error():
    with pytest.raises(ValueError, match=r"^the hook for 'logits' is not callable: 3$"):
        _model().hooks({"logits": 3}).__enter__()
    with pytest.raises(ValueError, match=r"^hooks are a mapping \{name: fn\}, got a list$"):
        _model().hooks(["logits"]).__enter__()


def test_a_deep_copy_has_hooks_of_its_own(gen):
    model = _model()
    twin = copy.deepcopy(model)
    fired = []
    with model.hooks({"logits": lambda a, n: fired.append("model"), "blocks.0.mlp_hidden": _raise}):
        twin(_tokens(gen))
    assert fired == []


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            lambda a: a[:, :, 1:],
            r"'blocks.1.z' returned shape \(3, 4, 8, 4\) for an activation of shape \(3, 4, 9, 4\)$",
        ),
        (lambda a: a.tolist(), r"^the hook on 'blocks.1.z' returned a list; return None or a tensor$"),
        (  # the model is float64: a float32 replacement failed later, in a product that did not name the hook
            lambda a: a.float(),
            r"^the hook on 'blocks.1.z' returned dtype torch.float32 for an activation of dtype torch.float64$",
        ),
        (lambda a: a.long(), r"returned dtype torch.int64 for an activation of dtype torch.float64$"),
    ],
)
def test_a_bad_replacement_is_a_one_line_value_error(gen, returned, message):
    model = _model()
    with pytest.raises(ValueError, match=message), model.hooks({"blocks.1.z": lambda a, n: returned(a)}):
        model(_tokens(gen))


def test_run_with_cache_takes_one_name_as_a_string(gen):
    model = _model()
    idx = _tokens(gen)
    logits, cache = model.run_with_cache(idx, names="logits")
    assert list(cache) == ["logits"] and torch.equal(cache["logits"], logits)
    assert list(model.run_with_cache(idx, names=["ln_final", "logits"])[1]) == ["ln_final", "logits"]


@pytest.mark.parametrize("name", ["blocks.0.ln1", "blocks.1.mlp_hidden", "blocks.0.pattern"])
def test_hooks_are_removed_after_the_block_even_when_it_raises(gen, name):
    model = _model()
    idx = _tokens(gen)
    fired = []
    with pytest.raises(RuntimeError, match="inside"), model.hooks({name: lambda a, n: fired.append(n)}):
        model(idx)
        raise RuntimeError("inside")
    with pytest.raises(RuntimeError, match="in the hook"), model.hooks({name: _raise}):
        model(idx)
    model(idx)
    assert fired == [name]
    assert not model._hooks and all(not module._forward_hooks for module in model.modules())


def _raise(activation: torch.Tensor, name: str) -> None:
    raise RuntimeError("in the hook")


def test_nested_hooks_compose_outer_first_and_each_block_removes_its_own(gen):
    model = _model()
    idx = _tokens(gen)
    order = []

    def tag(label: str):
        return lambda a, n: order.append((label, n))

    with model.hooks({"logits": tag("outer"), "blocks.1.mlp_hidden": tag("outer")}):
        with model.hooks({"logits": tag("inner"), "blocks.1.mlp_hidden": tag("inner")}):
            model(idx)
        model(idx)
    model(idx)
    hidden, logits = "blocks.1.mlp_hidden", "logits"
    assert order == [("outer", hidden), ("inner", hidden), ("outer", logits), ("inner", logits)] + [
        ("outer", hidden),
        ("outer", logits),
    ]


def test_an_inner_replacement_sees_the_outer_one(gen):
    model = _model()
    idx = _tokens(gen)
    with (
        model.hooks({"blocks.0.resid_post": lambda x, n: x + 1.0}),
        model.hooks({"blocks.0.resid_post": lambda x, n: x * 2.0}),
    ):
        both = model(idx).logits
    with model.hooks({"blocks.0.resid_post": lambda x, n: (x + 1.0) * 2.0}):
        once = model(idx).logits
    assert torch.equal(both, once)
