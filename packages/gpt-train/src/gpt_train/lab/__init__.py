"""The interpretability lab: analyses of a trained model through gpt-core's hook points that return records,
`findings` in words, `gpt-train inspect`, its report.html and `gpt-train serve`. The trainer imports nothing here."""

from gpt_train.lab.common import InspectError
from gpt_train.lab.heads import ABLATIONS, ablate_each_head, ablated_metrics, ablation_hooks, baseline_and_means
from gpt_train.lab.logit_lens import logit_lens
from gpt_train.lab.patching import corrupted_pairs, patch
from gpt_train.lab.reads import head_reads

__all__ = [
    "ABLATIONS",
    "InspectError",
    "ablate_each_head",
    "ablated_metrics",
    "ablation_hooks",
    "baseline_and_means",
    "corrupted_pairs",
    "head_reads",
    "logit_lens",
    "patch",
]
