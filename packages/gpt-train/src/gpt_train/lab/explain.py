"""The model on one prompt, as the explorer shows it: the greedy answer `gpt-train sample` gives, each answer token's
probability, and from one forward pass over what it reads, every head's attention and the logit lens at every depth."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpt_core import GPT, block_hook, generate, log_softmax
from gpt_tasks import evaluating
from gpt_train.lab.common import Record, position_ids
from gpt_train.lab.logit_lens import decode, depths
from gpt_train.prompts import (
    PromptError,
    Vocabulary,
    answer_tokens,
    cut_answer_note,
    encoded,
    prompt_generator,
    untrained_prompt_note,
)


@dataclass(frozen=True)
class PromptView(Record):
    """`tokens`: labels of what the model reads; `attention[layer][head][query][key]`; `lens_top[depth][position]`
    and `lens_probability`: the logit lens's most likely next token and its probability; `note`: for a prompt the
    task never trains on, the sentence saying so ('' otherwise)."""

    prompt: str
    answer: str
    tokens: list[str]
    prompt_length: int
    note: str
    answer_tokens: list[str]
    answer_probability: list[float]
    attention: list[list[list[list[float]]]]
    depths: list[str]
    lens_top: list[list[str]]
    lens_probability: list[list[float]]


MAX_READ = 256  # tokens the page explains: their (L, H, T, T) attention travels as JSON (a 2,000-token one: 0.9 GB)


def explain_prompt(vocabulary: Vocabulary, model: GPT, device: torch.device, text: str) -> PromptView:
    ids = encoded(vocabulary, model, text)
    if len(ids) >= MAX_READ:
        raise PromptError(
            f"the prompt is {len(ids):,} tokens long; the explorer reads at most {MAX_READ}, answer included"
        )
    full = answer_tokens(vocabulary, model, len(ids))
    wanted = min(full, MAX_READ + 1 - len(ids))
    limit = model.config.position_limit  # the page reads prompt and answer in one pass, within the positions
    n_new = wanted if limit is None else min(wanted, limit + 1 - len(ids))
    with evaluating(model):
        prompt = torch.tensor([ids], device=device)
        # greedy within the positions: generate's one draw from sample's generator of this prompt is the ids of all
        # it reads (a randomized model's; None for others), drawn again here for the pass that explains it
        generator = prompt_generator(device, text)
        out = generate(model, prompt, n_new, 0.0, None, use_cache=True, generator=generator, slide=True)[0].tolist()
        read = torch.tensor([out[:-1]], device=device)  # (1, T): what the model reads
        positions = position_ids(model, 1, read.shape[1], prompt_generator(device, text))
        patterns = [block_hook(layer, "pattern") for layer in range(model.config.n_layer)]
        residuals = list(depths(model))
        logits, cache = model.run_with_cache(read, names=patterns + residuals, positions=positions)
        log_probs = log_softmax(logits[0].float())  # (T, V)
        answer = out[len(ids) :]
        positions = torch.arange(len(ids) - 1, len(out) - 1, device=log_probs.device)
        answer_probability = log_probs[positions, torch.tensor(answer, device=log_probs.device)].exp().tolist()
        lens = torch.stack([log_softmax(decode(model, cache[name][0]).float()) for name in residuals])  # (D, T, V)
        top_log_prob, top = lens.max(dim=-1)  # (D, T)
        attention = torch.stack([cache[name][0] for name in patterns]).float()  # (L, H, T, T)
    cut = cut_answer_note(vocabulary, model, len(ids), len(answer), full, read_limit=MAX_READ)
    notes = untrained_prompt_note(vocabulary, ids), cut
    return PromptView(
        prompt=text,
        answer=vocabulary.decode(answer),
        tokens=vocabulary.token_labels(out[:-1]),
        prompt_length=len(ids),
        note="; ".join(filter(None, notes)),
        answer_tokens=vocabulary.token_labels(answer),
        answer_probability=answer_probability,
        attention=attention.cpu().tolist(),
        depths=list(depths(model).values()),
        lens_top=[vocabulary.token_labels(row) for row in top.tolist()],
        lens_probability=top_log_prob.exp().tolist(),
    )
