"""Task probes: named scalars about how a model computes (a metric says whether it is right), measured beside its
metrics at every evaluation from one forward pass over the task's probe batch with every hook point cached."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT, IGNORE_INDEX, block_hook
from gpt_tasks.task import Batch, Task, evaluating

PROBE_EXAMPLES = 256  # a share of attention to two decimals, cheap at every evaluation (docs/results/inspect.md)


@dataclass(frozen=True)
class ProbeCache:
    """A model's activations on a task's probe batch (`cache["blocks.1.pattern"]`), and that batch."""

    batch: Batch
    activations: Mapping[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.activations[name]


def measure_probes(task: Task, model: GPT, device: torch.device | str) -> dict[str, float]:
    """The task's probes of `model`, in eval mode without gradients; {} and no forward pass without probes."""
    if type(task).probes is Task.probes:
        return {}
    batch = task.probe_batch()
    with evaluating(model):
        cache = None
        if batch is not None:
            batch = batch.to(device)
            _, activations = model.run_with_cache(batch.inputs)
            cache = ProbeCache(batch, activations)
        return task.probes(model, cache)


# Induction heads and in-context learning (Olsson et al. 2022).
REPEATED_SEQUENCES = 64  # each head's score a mean over 64 x half-a-block queries: two decimals
OLSSON_CONTEXT, OLSSON_EARLY, OLSSON_LATE = 512, 50, 500  # the ICL score: loss at token 500 minus at 50, of 512


def repeated_random_tokens(vocab_size: int, block_size: int, n: int = REPEATED_SEQUENCES) -> Tensor:
    """n fixed sequences of block_size // 2 random tokens, each written twice: only copying predicts the second."""
    generator = torch.Generator().manual_seed(0)
    half = torch.randint(vocab_size, (n, block_size // 2), generator=generator, device="cpu")
    return torch.cat((half, half), dim=1)


def induction_scores(pattern: Tensor) -> Tensor:
    """Per head (H,), the mean weight of `pattern` (N, H, T, T) on sequences repeated twice that a query of the
    second copy, at i, puts on key i - half + 1: the token after its earlier occurrence."""
    half = pattern.shape[-1] // 2
    queries = torch.arange(half, 2 * half, device=pattern.device)
    return pattern[:, :, queries, queries - half + 1].mean(dim=(0, 2))


def previous_token_scores(pattern: Tensor) -> Tensor:
    """Per head (H,), the mean weight a query at i >= 1 of `pattern` (N, H, T, T) puts on key i - 1."""
    queries = torch.arange(1, pattern.shape[-1], device=pattern.device)
    return pattern[:, :, queries, queries - 1].mean(dim=(0, 2))


def position_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """(T,): the mean cross-entropy at each position over the targets scored there; NaN where there are none."""
    scored = targets != IGNORE_INDEX
    picked = logits.float().log_softmax(dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * scored).sum(dim=0) / scored.sum(dim=0)  # (T,)


def icl_positions(block_size: int) -> tuple[int, int]:
    """Olsson et al.'s tokens 50 and 500 of 512, scaled to the block (6 and 62 of 64)."""
    early = round(block_size * OLSSON_EARLY / OLSSON_CONTEXT)
    late = min(round(block_size * OLSSON_LATE / OLSSON_CONTEXT), block_size - 1)
    return early, late


def icl_score(logits: Tensor, targets: Tensor) -> float:
    """The loss late in the context minus early (`icl_positions`): negative when the context helps."""
    early, late = icl_positions(logits.shape[1])
    losses = position_losses(logits, targets)
    return float(losses[late] - losses[early])


def induction_probes(model: GPT, cache: ProbeCache) -> dict[str, float]:
    """Per head the induction and previous-token scores on repeated random tokens, the loss on their second copy,
    and `icl_score` on the probe batch in `cache` (scored at the early and late positions); none for a block of 1."""
    config = model.config
    if config.block_size < 2:  # a bigram model: one token of context, no copy of it to attend to
        return {}
    tokens = repeated_random_tokens(config.vocab_size, config.block_size).to(cache.batch.inputs.device)
    patterns = [block_hook(layer, "pattern") for layer in range(config.n_layer)]
    logits, recorded = model.run_with_cache(tokens, patterns)
    half = tokens.shape[1] // 2
    probes = {"icl_score": icl_score(cache["logits"], cache.batch.targets)}
    probes["repeated_loss"] = float(position_losses(logits[:, half:-1], tokens[:, half + 1 :]).mean())
    for layer, name in enumerate(patterns):
        for kind, scores in (("induction", induction_scores), ("previous_token", previous_token_scores)):
            probes |= {f"{kind}_l{layer}h{head}": score for head, score in enumerate(scores(recorded[name]).tolist())}
    return probes
