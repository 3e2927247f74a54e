"""The schema of a run directory, defined once for gpt-train, gpt-viz, the experiments and the benchmarks (plain
Python: no torch, no numpy): every file name a run leaves, and the grammar of metric keys (both in
packages/gpt-viz/README.md). gpt-tasks follows the grammar without importing it (gpt-train's test_run_schema.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

SPLITS = ("train", "heldout")
TRAIN, HELDOUT = SPLITS
EXAMPLES = "examples"  # the metric every evaluation reports: how many examples it scored
AXIS_KEYS = frozenset({"step", "elapsed"})  # on every metrics line: axes, not metrics
PROBE_PREFIX = "probe_"

_POSITION_NAME = re.compile(r"^(?P<label>[a-z]+)_(?P<index>\d+)_(?P<measure>[a-z_]+)$")


class MetricKey(NamedTuple):
    split: str
    name: str

    @property
    def is_position_detail(self) -> bool:
        return _POSITION_NAME.match(self.name) is not None

    @property
    def is_probe(self) -> bool:
        return self.name.startswith(PROBE_PREFIX)


def metric_key(split: str, name: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if not name:  # "train_" would not parse back
        raise ValueError("a metric key needs a metric name after the split")
    return f"{split}_{name}"


def probe_key(name: str) -> str:
    return metric_key(HELDOUT, PROBE_PREFIX + name)


def parse_metric_key(key: str) -> MetricKey | None:
    """The split and name of an evaluation key; None for a key without a split (``loss``, ``lr``, ``step``)."""
    split, sep, name = key.partition("_")
    if not sep or split not in SPLITS or not name:
        return None
    return MetricKey(split, name)


def _path_of(name: str) -> property:
    return property(lambda layout: layout.root / name, doc=f"The run's {name}.")


@dataclass(frozen=True)
class RunLayout:
    """Where each file of the run in `root` lives."""

    root: Path

    CONFIG = "config.json"  # everything the run was resolved to: task, model, training settings, versions
    METRICS = "metrics.jsonl"  # a JSON object per logged step: step, elapsed, loss, lr and, at evaluations, metrics
    FINAL = "final.json"  # the last record: the final evaluation of every split
    CHECKPOINT = "checkpoint.safetensors"  # weights, optimiser and RNG state (written atomically)
    ATTENTION = "attention.npz"  # every layer's attention on a few held-out examples (format: gpt_viz.run_data)
    CURVES_PICTURE = "curves.png"
    ATTENTION_PICTURE = "attention.png"
    GROKKING_PICTURE = "grokking.png"
    FILES = (CONFIG, METRICS, FINAL, CHECKPOINT, ATTENTION, CURVES_PICTURE, ATTENTION_PICTURE, GROKKING_PICTURE)
    """Every file a run writes under a fixed name; with the inspections and task files, what `--force` removes."""

    # What each `gpt-train inspect RUN <analysis>` writes beside the run: a record and its picture.
    HEADS_ABLATION = "inspect_heads.json"  # the primary metric with each head ablated (zero and mean), by layer
    HEADS_PICTURE = "inspect_heads.png"
    LOGIT_LENS = "inspect_logit_lens.json"  # metric and loss of the residual stream decoded after each layer
    LOGIT_LENS_PICTURE = "inspect_logit_lens.png"
    PATCHING_PREFIX = "inspect_patch_"  # one record and picture per hook point: inspect_patch_resid_pre.json, .png
    READS = "inspect_reads.json"  # each head's attention onto prompt tokens by value
    READS_PICTURE = "inspect_reads.png"
    PHASES = "inspect_phases.json"  # grokking's phases and progress measures at every snapshot
    PHASES_PICTURE = "inspect_phases.png"
    REPORT = "report.html"
    INSPECTIONS = (HEADS_ABLATION, HEADS_PICTURE, LOGIT_LENS, LOGIT_LENS_PICTURE, READS, READS_PICTURE, PHASES,
                   PHASES_PICTURE, REPORT)  # fmt: skip
    """The inspect files of a fixed name (and the patching files): its model's, so a replaced run drops them."""
    # What gpt-viz writes into the run where no --out is given: its model's pictures too, so a replaced run drops them.
    EXPLORE_PAGE = "explore.html"  # gpt-viz explore
    VIEW_PATTERNS = ("attention-layer*.png", "attention-layer*.svg", "curves.svg", "grokking.svg")
    SNAPSHOTS = "snapshots"  # with snapshot_every=N: the weights alone at step 0 and every N (checkpoint format)
    TASK_FILE_PREFIX = "task."  # a task's own files, one per parameter that points at it: task.tokenizer_file

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def name(self) -> str:
        """The run's name in titles: its directory's own name (that of `.` too), bytes that are not UTF-8 as \ufffd."""
        return os.fsencode(self.root.resolve().name).decode("utf-8", "replace")

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
        return self.root / f"{self.PATCHING_PREFIX}{point}.json"

    def patching_picture(self, point: str) -> Path:
        return self.root / f"{self.PATCHING_PREFIX}{point}.png"

    @classmethod
    def task_file_name(cls, parameter: str) -> str:
        return cls.TASK_FILE_PREFIX + parameter

    def task_file(self, parameter: str) -> Path:
        return self.root / self.task_file_name(parameter)

    def snapshot(self, step: int) -> Path:
        return self.root / self.SNAPSHOTS / f"step-{step:07d}.safetensors"

    def snapshots(self) -> dict[int, Path]:
        paths = self.root.glob(f"{self.SNAPSHOTS}/step-*.safetensors")
        found = {int(step): path for path in paths if (step := path.stem.removeprefix("step-")).isdigit()}
        return dict(sorted(found.items()))

    def existing(self) -> list[Path]:
        """The run files present: FILES, INSPECTIONS, then the patching files, gpt-viz's views, task files and
        snapshots by name."""
        fixed = self.FILES + self.INSPECTIONS + (self.EXPLORE_PAGE,)
        named = [self.root / name for name in fixed if (self.root / name).exists()]
        patched = [*self.root.glob(f"{self.PATCHING_PREFIX}*.json"), *self.root.glob(f"{self.PATCHING_PREFIX}*.png")]
        views = [path for pattern in self.VIEW_PATTERNS for path in sorted(self.root.glob(pattern))]
        tasks = sorted(self.root.glob(self.task_file_name("*")))
        return named + sorted(patched) + views + tasks + list(self.snapshots().values())
