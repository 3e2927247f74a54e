"""Looking inside a trained model through gpt-core's hook points: head ablation, the logit lens, activation
patching and what each head reads, each a library function returning a record that `gpt-train inspect`
prints, saves beside the run (gpt_viz.RunLayout's inspect files) and draws (gpt_viz.inspect_pictures);
gpt_train.analysis.findings says in words what a record shows."""

from gpt_train.analysis.common import InspectError
from gpt_train.analysis.heads import (
    ABLATIONS,
    HeadAblation,
    HeadMeans,
    ablate_each_head,
    ablated_metrics,
    ablation_hooks,
    baseline_and_means,
)
from gpt_train.analysis.logit_lens import LogitLens, logit_lens
from gpt_train.analysis.patching import Patching, corrupted_pairs, patch
from gpt_train.analysis.reads import HeadReads, head_reads

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
