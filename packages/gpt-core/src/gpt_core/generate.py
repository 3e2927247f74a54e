"""Autoregressive generation: greedy or sampled, batched, with or without the KV cache, static on a GPU."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
from torch import Tensor

from gpt_core.decode import StaticDecoder
from gpt_core.kernels.softmax import softmax
from gpt_core.model import GPT
from gpt_core.reference import upcast


def next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
               generator: torch.Generator | None = None,
               softmax: Callable[[Tensor], Tensor] = softmax) -> Tensor:  # fmt: skip
    """One token per row of logits (B, V): argmax at temperature 0 (the lowest id of a tie), else sampled from the
    top_k (with every token tied with the k-th, as nanoGPT's); a logit of -inf is never drawn. A row holding nan or
    +inf, or -inf alone, gives a meaningless token, unread: `generate` refuses it at the end."""
    return _sampled(logits, temperature, top_k, generator, softmax)[0]


def _sampled(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None,
             softmax: Callable[[Tensor], Tensor]) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """`next_token`'s tokens (B,) and whether each row's probabilities are finite (B,), None at temperature 0: a
    softmax kernel's nan (an online softmax on a row starting with -inf) would draw token 0, unread till the end."""
    if temperature == 0.0:
        return logits.argmax(dim=-1), None
    logits = upcast(logits)  # divided in 16 bits, two logits a small T keeps apart can round to one (B, V)
    scaled = logits / temperature
    if temperature < 1.0:  # only dividing by less than 1 can overflow: a row that did is shifted by its best logit
        overflowed = (~scaled.isfinite() & logits.isfinite()).any(dim=-1, keepdim=True)  # (B, 1)
        top = logits.amax(dim=-1, keepdim=True)  # (B, 1)
        # <= 0 everywhere, and exactly 0 at the best logit however small T is
        shifted = torch.where(logits == top, 0.0, (logits - top) / temperature)  # (B, V)
        scaled = torch.where(overflowed, shifted, scaled)
    logits = scaled
    if top_k is not None and top_k < logits.shape[-1]:
        kth_best = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    probs = softmax(logits)  # (B, V)
    # torch.multinomial's own draw of one sample, argmax p / q with q ~ Exp(1) (the Gumbel-max trick, exponentiated),
    # without its two checks of probs, each a read that waits for a GPU: `generate` checks them once at the end
    token = (probs / torch.empty_like(probs).exponential_(generator=generator)).argmax(dim=-1)
    return token, probs.isfinite().all(dim=-1)


def generate(model: GPT, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             use_cache: bool = True, generator: torch.Generator | None = None, slide: bool = False,
             static: bool = False) -> Tensor:  # fmt: skip
    """Extend each row of `idx` (B, T) by up to `max_new_tokens` tokens, in inference mode; returns (B, T + n_new).
    A model with a position limit (learned or randomized positions) stops at position_limit + 1 tokens (plain rope
    and none run on) or, with `slide`, continues from the last position_limit // 2 (at least one) as a fresh prompt
    (a prompt past the limit: its first token reads the last position_limit). A randomized model's ids are drawn
    once per window with `generator`. `static`: steps of fixed shapes (`gpt_core.decode`)."""
    if idx.dim() != 2 or idx.shape[0] == 0 or idx.shape[1] == 0:
        raise ValueError(f"idx must be (B, T) token ids with B >= 1 and T >= 1, got shape {tuple(idx.shape)}")
    if idx.dtype not in (torch.int64, torch.int32):  # the types an embedding indexes with
        raise ValueError(f"idx must hold token ids as int64 (or int32), got {idx.dtype}")
    if not 0 <= int(idx.min()) <= int(idx.max()) < model.config.vocab_size:
        raise ValueError(f"idx holds ids from {int(idx.min())} to {int(idx.max())}; the vocabulary has 0 to "
                         f"{model.config.vocab_size - 1}")  # fmt: skip
    try:
        max_new_tokens = operator.index(max_new_tokens)  # a NumPy integer too, never a float
    except TypeError:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}") from None
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if model.training and model.config.dropout:
        raise ValueError("generate would apply dropout at every step of a model in training mode; call model.eval()")
    if static and not use_cache:
        raise ValueError("static=True decodes with the KV cache; it cannot be combined with use_cache=False")
    block = model.config.position_limit
    with torch.inference_mode():
        if block is None or not slide:
            out = _generate_once(model, idx, max_new_tokens, temperature, top_k, use_cache, generator, static)
        else:
            out = idx
            while out.shape[1] - idx.shape[1] < max_new_tokens:
                keep = block if out is idx else max(block // 2, 1)  # a long prompt's first token reads a full block
                context = out if out.shape[1] <= block else out[:, -keep:]
                wanted = max_new_tokens - (out.shape[1] - idx.shape[1])
                extended = _generate_once(model, context, wanted, temperature, top_k, use_cache, generator, static)
                out = torch.cat((out, extended[:, context.shape[1] :]), dim=1)
    return out.clone()  # an inference-mode tensor could not be saved for a later backward


def _generate_once(model: GPT, idx: Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
                   use_cache: bool, generator: torch.Generator | None, static: bool) -> Tensor:  # fmt: skip
    """One pass of generation, never past the position limit (block_size or max_positions)."""
    B, T = idx.shape
    n_new = max_new_tokens
    config = model.config
    config.check_positions(T, "the prompt")
    if config.position_limit is not None:
        n_new = min(n_new, config.position_limit + 1 - T)
    if n_new <= 0:
        return idx

    length = T + n_new - 1  # the last token is never read
    positions = model.sample_positions(B, length, generator) if config.randomized_positions else None
    if static:
        decoder = StaticDecoder(model, B, length, positions, graph=idx.device.type == "cuda")
        logits = decoder.prefill(idx)
    else:
        cache = model.new_cache(B, length, positions) if use_cache else None  # holding the ids, checked once
        logits = model(idx, cache=cache, positions=None if use_cache else _first(positions, T)).logits
    tokens = [idx]
    best = []  # each step's best logit per row: finite unless a row holds nan or +inf or is -inf throughout
    finite = []  # each sampled step's probabilities, finite per row: what the sampling_softmax kernel gave
    for step in range(n_new):
        last = logits[:, -1, :]  # (B, V)
        best.append(last.amax(dim=-1))  # (B,), one kernel a token, read once at the end; -inf alone bans a token
        token, probs_finite = _sampled(last, temperature, top_k, generator, model.kernels.sampling_softmax)  # (B,)
        finite += [] if probs_finite is None else [probs_finite]
        tokens.append(token[:, None].to(idx.dtype))
        if step == n_new - 1:
            break
        if static:
            logits = decoder.step(token[:, None])  # (B, 1, V)
        elif use_cache:
            logits = model(token[:, None], cache=cache).logits
        else:
            logits = model(torch.cat(tokens, dim=1), positions=_first(positions, T + step + 1)).logits
    bad_logits = ~torch.stack(best).isfinite().all()
    bad_probs = ~torch.stack(finite).all() if finite else torch.zeros((), dtype=torch.bool, device=idx.device)
    verdict = int(bad_logits * 2 + bad_probs)  # one read for both: 2 or 3 the logits, 1 the probabilities alone
    if verdict >= 2:
        raise ValueError(
            "the model gave logits that are nan or +inf, or -inf for every token: its tokens would be meaningless"
        )
    if verdict == 1:
        raise ValueError(
            "the model's sampling_softmax kernel gave probabilities that are nan or infinite, its logits finite: its "
            "tokens would be meaningless"
        )
    return torch.cat(tokens, dim=1)


def _first(positions: Tensor | None, n: int) -> Tensor | None:
    """The ids (B, n) of a sequence's first n tokens, or None (the model's default positions)."""
    return None if positions is None else positions[:, :n]
