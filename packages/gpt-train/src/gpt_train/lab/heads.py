"""Head ablation: the task's primary metric on a fixed held-out sample with attention heads removed. A head writes to
the residual stream only through its output z, so replacing z removes it alone: zero ablation sets z to 0, mean
ablation to its mean z at that position over the sample (keeping what it writes whatever the input: a bias)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.nn.functional import pad

from gpt_core import GPT, HookFn, block_hook
from gpt_tasks import Task
from gpt_train.lab.common import Record, check_index
from gpt_viz import HELDOUT

Ablation = Literal["zero", "mean"]
ABLATIONS: tuple[Ablation, ...] = ("zero", "mean")
Head = tuple[int, int]  # (layer, head)


@dataclass(frozen=True)
class HeadAblation(Record):
    """The primary metric with no head removed, with each head removed alone by each ablation ([layer][head]), and
    with every head of a layer zero-ablated together (`layer_zero`: a layer can be unused although each of its heads
    alone seems to matter); `to_json` is inspect_heads.json."""

    metric: str
    examples: int
    baseline: float
    zero: list[list[float]]
    mean: list[list[float]]
    layer_zero: list[float]
    higher_is_better: bool = True
    split: str = HELDOUT


class HeadMeans:
    """Each head's mean z at each position over exactly the scored sample, recorded by hooks while the task scores
    the model; each call's activations sit at the model's `hook_offset` (a KV-cached step hands over one)."""

    def __init__(self) -> None:
        self.sums: dict[int, Tensor] = {}  # layer -> (H, P, d), float64
        self.counts: dict[int, Tensor] = {}  # layer -> (P,)

    def hooks(self, model: GPT) -> dict[str, HookFn]:
        return {block_hook(layer, "z"): self._recorder(model, layer) for layer in range(model.config.n_layer)}

    def _recorder(self, model: GPT, layer: int) -> HookFn:
        def record(z: Tensor, name: str) -> None:  # z: (B, H, T, d)
            start = model.hook_offset
            end = start + z.shape[2]
            if layer not in self.sums:
                self.sums[layer] = torch.zeros(z.shape[1], 0, z.shape[3], dtype=torch.float64, device="cpu")
                self.counts[layer] = torch.zeros(0, dtype=torch.float64, device="cpu")
            sums, counts = self.sums[layer], self.counts[layer]
            if end > len(counts):  # positions no call reached before
                sums, counts = pad(sums, (0, 0, 0, end - len(counts))), pad(counts, (0, end - len(counts)))
            sums[:, start:end] += z.cpu().double().sum(dim=0)  # on the CPU: MPS has no float64
            counts[start:end] += z.shape[0]
            self.sums[layer], self.counts[layer] = sums, counts

        return record

    def of(self, layer: int) -> Tensor:
        """(H, P, d): each head's mean z at each position the scoring reached."""
        return self.sums[layer] / self.counts[layer][None, :, None]


def ablation_hooks(
    model: GPT, heads: Iterable[Head], how: Ablation, means: HeadMeans | None = None
) -> dict[str, HookFn]:
    """Hooks on z that remove `heads` ((layer, head) pairs): set to zero, or to the head's recorded mean."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        check_index("layer", layer, model.config.n_layer, "the model has {} layers")
        check_index("head", head, model.config.n_head, "each layer has {} heads")
        by_layer.setdefault(layer, []).append(head)
    if how == "mean" and means is None:
        raise ValueError("mean ablation needs the heads' recorded means")

    def remover(layer: int, chosen: list[int]) -> HookFn:
        def remove(z: Tensor, name: str) -> Tensor:  # (B, H, T, d)
            start = model.hook_offset
            z = z.clone()
            if how == "zero":
                z[:, chosen] = 0.0
            else:
                z[:, chosen] = means.of(layer)[chosen, start : start + z.shape[2]].to(z)[None]
            return z

        return remove

    return {block_hook(layer, "z"): remover(layer, chosen) for layer, chosen in by_layer.items()}


def baseline_and_means(
    task: Task, model: GPT, device: torch.device, examples: int
) -> tuple[dict[str, float], HeadMeans]:
    """The unablated metrics, and each head's mean z recorded while they were scored."""
    means = HeadMeans()
    with model.hooks(means.hooks(model)):
        metrics = task.evaluate(model, HELDOUT, device, examples)
    return metrics, means


def ablated_metrics(
    task: Task,
    model: GPT,
    device: torch.device,
    heads: Sequence[Head],
    how: Ablation,
    examples: int,
    means: HeadMeans | None = None,
) -> dict[str, float]:
    """The task's metrics with `heads` removed together."""
    with model.hooks(ablation_hooks(model, heads, how, means)):
        return task.evaluate(model, HELDOUT, device, examples)


def ablate_each_head(
    task: Task, model: GPT, device: torch.device, examples: int, progress: Callable[[], None] = lambda: None
) -> HeadAblation:
    """Every head removed alone, by zero and by mean ablation, then each layer's heads zero-ablated together;
    `progress()` is called after each evaluation (the baseline's included)."""
    metric = task.primary_metric
    baseline, means = baseline_and_means(task, model, device, examples)
    progress()
    c = model.config

    def scored(heads: list[Head], how: Ablation) -> float:
        value = ablated_metrics(task, model, device, heads, how, examples, means)[metric]
        progress()
        return value

    zero, mean = (
        [[scored([(layer, head)], how) for head in range(c.n_head)] for layer in range(c.n_layer)] for how in ABLATIONS
    )
    layer_zero = [scored([(layer, head) for head in range(c.n_head)], "zero") for layer in range(c.n_layer)]
    return HeadAblation(
        metric, int(baseline["examples"]), baseline[metric], zero, mean, layer_zero, task.higher_is_better
    )
