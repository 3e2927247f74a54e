"""Task probes: named scalars about how a model computes, measured beside its metrics at every evaluation.

A metric says whether a model is right; a probe says something about how. `measure_probes` runs the model once
on the task's probe batch with every hook point cached and hands the task a `ProbeCache`; a task without probes
costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from gpt_core import GPT, IGNORE_INDEX, block_hook
from gpt_tasks.task import Batch, Task, evaluating

PROBE_EXAMPLES = 256
"""Held-out examples a probe batch holds: enough that a share of attention reads to two decimals, cheap to
run at every evaluation (one forward pass with every hook point cached). Measured on the default sort task
(docs/results/inspect.md): 512 cost a third of an evaluation of 2,000 examples, 256 a sixth, and a run's
logged source_attention moved by at most 0.006 between the two."""


@dataclass(frozen=True)
class ProbeCache:
    """A model's activations on a task's probe batch: `cache["blocks.1.pattern"]` is the named hook point's
    tensor (see `GPT.hook_names`), `batch` the inputs it read and their targets."""

    batch: Batch
    activations: Mapping[str, Tensor]

    def __getitem__(self, name: str) -> Tensor:
        return self.activations[name]


def measure_probes(task: Task, model: GPT, device: torch.device | str) -> dict[str, float]:
    """The task's probes of `model`, in eval mode without gradients; {} for a task without probes."""
    if type(task).probes is Task.probes:  # the default measures nothing: no forward pass
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
REPEATED_SEQUENCES = 64
"""Sequences of random tokens repeated twice that the induction probes read: each head's score is a mean over
64 x half-a-block queries, which reads to two decimals."""
OLSSON_CONTEXT, OLSSON_EARLY, OLSSON_LATE = 512, 50, 500
"""Olsson et al.'s in-context-learning score: the loss at token 500 minus the loss at token 50 of 512."""


def repeated_random_tokens(vocab_size: int, block_size: int, n: int = REPEATED_SEQUENCES) -> Tensor:
    """(n, 2 * (block_size // 2)): n fixed sequences of block_size // 2 uniform random tokens, each written twice.
    The second copy can be predicted only by finding the earlier occurrence of each token and copying the next."""
    generator = torch.Generator().manual_seed(0)
    half = torch.randint(vocab_size, (n, block_size // 2), generator=generator, device="cpu")
    return torch.cat((half, half), dim=1)


def induction_scores(pattern: Tensor) -> Tensor:
    """Per head (H,), the prefix-matching score of attention `pattern` (N, H, T, T) on sequences repeated twice
    (T = 2 * half): the mean weight that a query of the second copy, at i, puts on key i - half + 1, the token
    after its earlier occurrence. 1.0 for a head that attends there alone."""
    half = pattern.shape[-1] // 2
    queries = torch.arange(half, 2 * half, device=pattern.device)
    return pattern[:, :, queries, queries - half + 1].mean(dim=(0, 2))


def previous_token_scores(pattern: Tensor) -> Tensor:
    """Per head (H,), the mean weight a query at i >= 1 of `pattern` (N, H, T, T) puts on key i - 1."""
    queries = torch.arange(1, pattern.shape[-1], device=pattern.device)
    return pattern[:, :, queries, queries - 1].mean(dim=(0, 2))


def position_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """(T,): the mean cross-entropy at each position of `logits` (N, T, V) against `targets` (N, T), over the
    targets scored there (not IGNORE_INDEX); NaN at a position with none."""
    scored = targets != IGNORE_INDEX
    picked = logits.float().log_softmax(dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * scored).sum(dim=0) / scored.sum(dim=0)  # (T,)


def icl_positions(block_size: int) -> tuple[int, int]:
    """The early and late positions of the in-context-learning score: Olsson et al.'s tokens 50 and 500 of 512
    scaled to the block, round(block_size * 50 / 512) and round(block_size * 500 / 512) (6 and 62 of 64)."""
    early = round(block_size * OLSSON_EARLY / OLSSON_CONTEXT)
    late = min(round(block_size * OLSSON_LATE / OLSSON_CONTEXT), block_size - 1)
    return early, late


def icl_score(logits: Tensor, targets: Tensor) -> float:
    """The loss late in the context minus the loss early in it (`icl_positions`): negative when later tokens
    are predicted better because of what came before them in the context."""
    early, late = icl_positions(logits.shape[1])
    losses = position_losses(logits, targets)
    return float(losses[late] - losses[early])


def induction_probes(model: GPT, cache: ProbeCache) -> dict[str, float]:
    """The induction probes of a language model: per head the induction and previous-token scores on repeated
    random tokens, the loss on their second copy (`repeated_loss`), and `icl_score` on the held-out probe batch
    in `cache`, whose targets must be scored at the early and late positions. Runs the model once more, on the
    repeated tokens."""
    config = model.config
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
