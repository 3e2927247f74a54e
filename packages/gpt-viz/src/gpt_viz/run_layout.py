"""The schema of a run directory: the name of every file a run leaves, and the grammar of metric keys.

gpt-train writes through this module; gpt-viz, the experiments and the benchmarks read through it,
so each name is defined once. It is plain Python (no torch, no numpy). gpt-tasks, which depends on no
sibling but gpt-core, names its splits and metrics by the grammar below without importing it; gpt-train's
tests hold the two together (tests/test_run_schema.py).

Metric keys. A task's evaluation returns metrics by *name* (``exact_match``, ``loss``,
``position_3_accuracy``); a run logs each under a *key* that also names the split it was measured
on: ``<split>_<name>`` (``heldout_exact_match``). A name of the form ``<label>_<index>_<measure>``
(``position_3_accuracy``, ``digit_0_accuracy``) is a per-position detail of the answer: summaries
leave those out. ``loss``, ``lr``, ``step`` and ``elapsed`` carry no split: the training loss and
learning rate of the step, and the axes. A name starting ``probe_`` (``heldout_probe_source_attention``)
is a task probe (gpt-tasks' ``Task.probes``): a scalar about how the model computes, measured on held-out
examples at every evaluation; pictures draw probes under the metric curve.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

SPLITS = ("train", "heldout")
"""The splits a task evaluates on (gpt-tasks' `Task.evaluate`), which start a metric key."""
TRAIN, HELDOUT = SPLITS
EXAMPLES = "examples"
"""The metric every evaluation reports: how many examples it scored."""

AXIS_KEYS = frozenset({"step", "elapsed"})
"""Bookkeeping on every metrics line: axes, not metrics."""

PROBE_PREFIX = "probe_"
"""What starts the metric name of a task probe."""

_POSITION_NAME = re.compile(r"^(?P<label>[a-z]+)_(?P<index>\d+)_(?P<measure>[a-z_]+)$")


class MetricKey(NamedTuple):
    """A parsed metric key: the split it was measured on and the task's metric name."""

    split: str
    name: str

    @property
    def is_position_detail(self) -> bool:
        """Whether the name is a per-answer-position metric (``position_3_accuracy``)."""
        return _POSITION_NAME.match(self.name) is not None

    @property
    def is_probe(self) -> bool:
        """Whether the name is a task probe's (``probe_source_attention``)."""
        return self.name.startswith(PROBE_PREFIX)


def metric_key(split: str, name: str) -> str:
    """The key under which metric `name`, measured on `split`, is logged: ``heldout_exact_match``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if not name:
        raise ValueError("a metric key needs a metric name after the split")  # "train_" would not read back
    return f"{split}_{name}"


def probe_key(name: str) -> str:
    """The key under which task probe `name`, measured on held-out examples, is logged:
    ``heldout_probe_source_attention``."""
    return metric_key(HELDOUT, PROBE_PREFIX + name)


def parse_metric_key(key: str) -> MetricKey | None:
    """The split and name of an evaluation key; None for a key without a split (``loss``, ``lr``, ``step``)."""
    split, sep, name = key.partition("_")
    if not sep or split not in SPLITS or not name:
        return None
    return MetricKey(split, name)


def _path_of(name: str) -> property:
    """A RunLayout property: the path of file `name` in the run's directory."""
    return property(lambda layout: layout.root / name, doc=f"The run's {name}.")


@dataclass(frozen=True)
class RunLayout:
    """Where each file of the run in `root` lives."""

    root: Path

    CONFIG = "config.json"
    """Everything the run was resolved to: task, parameters, model, training settings, versions."""
    METRICS = "metrics.jsonl"
    """One JSON object per logged step: step, elapsed, loss, lr and, at evaluations, metric keys."""
    FINAL = "final.json"
    """The last record: the final evaluation of every split."""
    CHECKPOINT = "checkpoint.safetensors"
    """Weights, optimiser and RNG state (written atomically)."""
    ATTENTION = "attention.npz"
    """Every layer's attention on a few held-out examples: weights (N, L, H, T, T), token labels
    (N, T) and lengths (N,), shorter examples padded to the longest (format: gpt_viz.run_data). A run from before
    several were kept has weights (L, H, T, T) and tokens (T,): one example."""
    CURVES_PICTURE = "curves.png"
    ATTENTION_PICTURE = "attention.png"
    GROKKING_PICTURE = "grokking.png"

    FILES = (CONFIG, METRICS, FINAL, CHECKPOINT, ATTENTION, CURVES_PICTURE, ATTENTION_PICTURE, GROKKING_PICTURE)
    """Every file a run writes under a fixed name; with the inspections and task files, what `--force` removes."""
    HEADS_ABLATION = "inspect_heads.json"
    """`gpt-train inspect RUN heads`: the primary metric with each head zero- and mean-ablated:
    {"metric", "split", "examples", "baseline", "zero": [[per head] per layer], "mean": [[...]]}."""
    HEADS_PICTURE = "inspect_heads.png"
    LOGIT_LENS = "inspect_logit_lens.json"
    """`gpt-train inspect RUN logit-lens`: metric and loss of the residual stream decoded after each layer."""
    LOGIT_LENS_PICTURE = "inspect_logit_lens.png"
    PATCHING_PREFIX = "inspect_patch_"
    """`gpt-train inspect RUN patch --hook POINT`: the share of the clean answer's logit difference each patch
    restores, one record and picture per hook point (`inspect_patch_resid_pre.json`, `.png`), so patching
    another point keeps the first one's."""
    READS = "inspect_reads.json"
    """`gpt-train inspect RUN reads`: each head's mean attention from the answer positions onto each prompt
    token, by that token's value and the value just written."""
    READS_PICTURE = "inspect_reads.png"
    PHASES = "inspect_phases.json"
    """`gpt-train inspect RUN phases`: the key frequencies, the phases' boundaries and, at every snapshot, the
    accuracies, the losses, the restricted and excluded losses and the weight norm."""
    PHASES_PICTURE = "inspect_phases.png"
    REPORT = "report.html"
    """`gpt-train inspect RUN report`: the findings, pictures and tables of every analysis, in one page."""
    INSPECTIONS = (HEADS_ABLATION, HEADS_PICTURE, LOGIT_LENS, LOGIT_LENS_PICTURE, READS, READS_PICTURE, PHASES,
                   PHASES_PICTURE, REPORT)  # fmt: skip
    """What `gpt-train inspect` writes beside a finished run under a fixed name (and the patching files):
    its model's, so a replaced run drops them."""
    SNAPSHOTS = "snapshots"
    """With `--set snapshot_every=N`: the weights alone at step 0 and every N steps, one file a step
    (`snapshots/step-0000020.safetensors`, gpt-train's checkpoint format without optimiser or RNG state)."""
    TASK_FILE_PREFIX = "task."
    """A task's own files (`Task.files()`: a trained tokenizer, say), one per task parameter that points at it,
    named `task.<parameter>` (`task.tokenizer_file`)."""

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    config = _path_of(CONFIG)
    metrics = _path_of(METRICS)
    final = _path_of(FINAL)
    checkpoint = _path_of(CHECKPOINT)
    attention = _path_of(ATTENTION)
    curves_picture = _path_of(CURVES_PICTURE)
    attention_picture = _path_of(ATTENTION_PICTURE)
    grokking_picture = _path_of(GROKKING_PICTURE)
    heads_ablation = _path_of(HEADS_ABLATION)
    heads_picture = _path_of(HEADS_PICTURE)
    logit_lens = _path_of(LOGIT_LENS)
    logit_lens_picture = _path_of(LOGIT_LENS_PICTURE)
    reads = _path_of(READS)
    reads_picture = _path_of(READS_PICTURE)
    phases = _path_of(PHASES)
    phases_picture = _path_of(PHASES_PICTURE)
    report = _path_of(REPORT)

    def patching(self, point: str) -> Path:
        """The record of patching hook point `point` (resid_pre, attn_out, ...)."""
        return self.root / f"{self.PATCHING_PREFIX}{point}.json"

    def patching_picture(self, point: str) -> Path:
        """The picture of patching hook point `point`."""
        return self.root / f"{self.PATCHING_PREFIX}{point}.png"

    @classmethod
    def task_file_name(cls, parameter: str) -> str:
        """The name, in a run directory, of the task file that task parameter `parameter` points at."""
        return cls.TASK_FILE_PREFIX + parameter

    def task_file(self, parameter: str) -> Path:
        """The path of the task file that task parameter `parameter` points at."""
        return self.root / self.task_file_name(parameter)

    def snapshot(self, step: int) -> Path:
        """Where the weights at `step` are kept (`snapshot_every`)."""
        return self.root / self.SNAPSHOTS / f"step-{step:07d}.safetensors"

    def snapshots(self) -> dict[int, Path]:
        """The snapshots present, by step, in step order."""
        paths = self.root.glob(f"{self.SNAPSHOTS}/step-*.safetensors")
        found = {int(step): path for path in paths if (step := path.stem.removeprefix("step-")).isdigit()}
        return dict(sorted(found.items()))

    def existing(self) -> list[Path]:
        """The run files present in the directory, in FILES then INSPECTIONS order, then the patching files, the
        task files and the snapshots, each sorted by name."""
        named = [self.root / name for name in self.FILES + self.INSPECTIONS if (self.root / name).exists()]
        patched = [*self.root.glob(f"{self.PATCHING_PREFIX}*.json"), *self.root.glob(f"{self.PATCHING_PREFIX}*.png")]
        tasks = sorted(self.root.glob(self.task_file_name("*")))
        return named + sorted(patched) + tasks + list(self.snapshots().values())
