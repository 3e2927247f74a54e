"""A progress bar for an evaluation: examples scored so far, out of how many the splits hold.

The task's evaluation is one call with no progress of its own, so the bar counts what reaches the model:
every forward pass reading more than one token per row is a batch of new examples (a prompt, or a text
window); the cached decoding steps that follow read one token and are not counted again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

from gpt_core import GPT
from gpt_tasks import PromptAnswerTask, Task


def examples_scored(task: Task, splits: Sequence[str], limit: int | None) -> int | None:
    """How many examples an evaluation of `splits` scores, where the task can say; None where not."""
    try:
        if isinstance(task, PromptAnswerTask):
            return sum(len(task.split.evaluation_ids(split, limit)) for split in splits)
        windows = getattr(task, "evaluation_windows", None)
        return sum(len(windows(split, limit)) for split in splits) if callable(windows) else None
    except (TypeError, ValueError):
        return None


@contextmanager
def evaluation_progress(
    task: Task, model: GPT, splits: Sequence[str], limit: int | None, enabled: bool, desc: str = "final evaluation"
) -> Iterator[None]:
    """Within the block, a bar advances by each batch of new examples the model reads."""
    if not enabled:
        yield
        return
    bar = tqdm(total=examples_scored(task, splits, limit), desc=desc, unit=" examples", leave=False, dynamic_ncols=True)

    def count(module: Any, args: tuple[Any, ...], output: Any) -> None:
        idx = args[0] if args else None
        if idx is not None and idx.dim() == 2 and idx.shape[1] > 1:
            bar.update(idx.shape[0])

    handle = model.register_forward_hook(count)
    try:
        yield
    finally:
        handle.remove()
        bar.close()
