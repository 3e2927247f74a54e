"""The interpretability lab: looking inside a trained model through gpt-core's hook points.

The analyses (head ablation, the logit lens, activation patching, what each head reads, grokking's phases) return
records; `findings` says in words what a record shows; `inspect` is `gpt-train inspect`, `report` writes report.html
and `serve` is `gpt-train serve`, the explorer on the learner's own prompt (`explain`), with the run's records
checked by `records`. The trainer and `gpt-train sample` import nothing from here."""

from gpt_train.lab.common import InspectError
from gpt_train.lab.heads import (
    ABLATIONS,
    HeadAblation,
    HeadMeans,
    ablate_each_head,
    ablated_metrics,
    ablation_hooks,
    baseline_and_means,
)
from gpt_train.lab.logit_lens import LogitLens, logit_lens
from gpt_train.lab.patching import Patching, corrupted_pairs, patch
from gpt_train.lab.reads import HeadReads, head_reads

__all__ = [
    "ABLATIONS",
    "HeadAblation",
    "HeadMeans",
    "HeadReads",
    "InspectError",
    "LogitLens",
    "Patching",
    "ablate_each_head",
    "ablated_metrics",
    "ablation_hooks",
    "baseline_and_means",
    "corrupted_pairs",
    "head_reads",
    "logit_lens",
    "patch",
]
