"""The progress bars of a training run: the steps, and the final evaluation's examples."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from gpt_tasks.scoring import reporting_progress
from gpt_train.config import RunConfig


class Progress:
    """The progress bar: steps, the last loss and the latest primary metric, redrawn at tqdm's pace."""

    def __init__(self, config: RunConfig, start: int, quiet: bool):
        self.primary = config.primary_metric
        quieted = {"disable": True} if quiet else {}  # otherwise tqdm's own default, which TQDM_DISABLE=1 sets
        self.bar = tqdm(total=config.train.steps, initial=start, desc=config.task, dynamic_ncols=True, **quieted)

    def update(self, loss: float, latest: dict[str, float]) -> None:
        if self.bar.disable:
            return
        shown = {"loss": f"{loss:.4g}"}  # four significant digits: a loss of 4.5e-05 is not 0.0000
        if self.primary in latest:
            shown[self.primary] = f"{latest[self.primary]:.4f}"
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def ends_at(self, step: int) -> None:
        self.bar.total = step
        self.bar.refresh()

    @staticmethod
    def note(text: str) -> None:
        """One line on stderr above the bar, which is redrawn below it."""
        tqdm.write(f"gpt-train: {text}", file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


@contextmanager
def evaluation_progress(quiet: bool) -> Iterator[None]:
    """Within the block, a bar for each split an evaluation walks (none when quiet): a long one looks like a hang."""
    if quiet:
        yield
        return
    bars: dict[str, tqdm] = {}

    def report(split: str, done: int, total: int) -> None:
        if split not in bars:
            bars[split] = tqdm(total=total, desc=f"evaluating {split}", unit=" examples", leave=False)
        bars[split].update(done - bars[split].n)

    try:
        with reporting_progress(report):
            yield
    finally:
        for bar in bars.values():
            bar.close()
