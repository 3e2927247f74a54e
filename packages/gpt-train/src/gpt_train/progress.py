"""The progress bars of a training run: the steps, and the final evaluation's examples."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

from gpt_tasks.scoring import reporting_progress
from gpt_train.config import RunConfig


class Progress:
    """The progress bar: steps, the last loss and the latest primary metric. It redraws at tqdm's own pace
    (at most ten times a second), not at every step: a redraw costs more than a small model's step."""

    def __init__(self, config: RunConfig, start: int, quiet: bool):
        self.primary = config.primary_metric
        self.bar = tqdm(total=config.train.steps, initial=start, disable=quiet, desc=config.task, dynamic_ncols=True)

    def update(self, loss: float, latest: dict[str, float]) -> None:
        if self.bar.disable:
            return
        shown = {"loss": f"{loss:.4f}"}
        if self.primary in latest:
            shown[self.primary] = f"{latest[self.primary]:.4f}"
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def ends_at(self, step: int) -> None:
        """The run now stops at `step` (`cooldown_trigger` moved its end)."""
        self.bar.total = step
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


@contextmanager
def evaluation_progress(quiet: bool) -> Iterator[None]:
    """Within the with-block, a bar on stderr for each split an evaluation walks in chunks (none when quiet):
    scoring a whole held-out split takes long enough to look like a hang without one."""
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
