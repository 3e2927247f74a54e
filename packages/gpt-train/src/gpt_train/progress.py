"""The progress bar of a training run."""

from __future__ import annotations

from tqdm.auto import tqdm

from gpt_train.config import RunConfig


class Progress:
    """The progress bar: steps, the last loss and the latest primary metric."""

    def __init__(self, config: RunConfig, start: int, quiet: bool):
        self.primary = config.primary_metric
        self.bar = tqdm(total=config.train.steps, initial=start, disable=quiet, desc=config.task, dynamic_ncols=True)

    def update(self, loss: float, latest: dict[str, float]) -> None:
        self.bar.update(1)
        shown = {"loss": f"{loss:.4f}"}
        if self.primary in latest:
            shown[self.primary] = f"{latest[self.primary]:.4f}"
        self.bar.set_postfix(shown)

    def close(self) -> None:
        self.bar.close()
