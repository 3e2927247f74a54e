"""The progress bars of a training run: the steps, and the final evaluation's examples."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from gpt_tasks.scoring import reporting_progress
from gpt_train.config import RunConfig


def format_loss(value: float) -> str:
    """A loss, or a metric for which lower is better: four decimals, or below 0.001 four significant digits, so that
    4.5e-05 never reads as 0.0000."""
    return f"{value:.4g}" if abs(value) < 0.00095 else f"{value:.4f}"  # 0.00099996 rounds to 0.0010 as 0.001 does


class Progress:
    """The progress bar: steps, the last loss and the latest primary metric, redrawn at tqdm's pace."""

    def __init__(self, config: RunConfig, start: int, quiet: bool):
        self.primary = config.primary_metric
        self.shown = (lambda value: f"{value:.4f}") if config.higher_is_better else format_loss
        quieted = {"disable": True} if quiet else {}  # otherwise tqdm's own default, which TQDM_DISABLE=1 sets
        self.bar = tqdm(total=config.train.steps, initial=start, desc=config.task, dynamic_ncols=True, **quieted)

    def update(self, loss: float, latest: dict[str, float]) -> None:
        if self.bar.disable:
            return
        shown = {"loss": format_loss(loss)}
        if self.primary in latest:
            shown[self.primary] = self.shown(latest[self.primary])
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
