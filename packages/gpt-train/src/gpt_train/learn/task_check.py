"""Grade the task step: the learner's PromptAnswerTask registered through gpt-tasks' registry (as an installed plugin
would be), trained briefly and scored on the held-out side of its hash split."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from gpt_core import GPT
from gpt_core.plugins import hookimpl
from gpt_tasks import PromptAnswerTask, Registry
from gpt_train.learn.grader import Verdict
from gpt_train.learn.loading import LearnerError, attempt, describe, is_stub, load_module, where

STEPS, BATCH, LR, EVAL_LIMIT = 120, 64, 3e-3, 500  # enough for a small model to learn a simple mapping
SHAPE = {"n_layer": 1, "n_head": 2, "n_embd": 32}
LEARNED = 0.5  # the final loss must be below this fraction of the first


def check_task(path: Path, source: bytes | None = None) -> Verdict:
    """Load the learner's task file (from `source`, its bytes as read, when given), register, train and score it."""
    try:
        module = load_module(path, source)
    except LearnerError as error:
        return Verdict(False, str(error))
    found = [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, PromptAnswerTask)
             and value.__module__ == module.__name__]  # fmt: skip
    if len(found) != 1:
        return Verdict(False, f"{path}: define exactly one PromptAnswerTask subclass (found {len(found)})")
    task_class = found[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugin = SimpleNamespace(register_tasks=hookimpl(lambda register: register(task_class)))
        installed = SimpleNamespace(name="learn", value="", dist=None, load=lambda: plugin)  # an entry point's shape
        registry = Registry(plugins=[installed])
    if caught:
        return Verdict(False, f"{path}: {caught[0].message}")
    verdict, error = attempt(lambda: _train_and_score(registry.get(task_class.name), path))
    if error is None:
        return verdict
    if is_stub(error):
        return Verdict(False, f"{where(error, path)}: the task is not written yet (it raises NotImplementedError)")
    return Verdict(False, f"{where(error, path)}: the task raised {describe(error)}")


def _train_and_score(task: PromptAnswerTask, path: Path) -> Verdict:
    if task.split.count("heldout") == 0 or task.split.count("train") == 0:
        return Verdict(False, f"{path}: the split leaves no examples on one side; set heldout_fraction in (0, 1)")
    sequences = task.sequences(task.split.evaluation_ids("train", 64))  # what training would index the model with
    shape = (len(sequences), task.prompt_length + task.answer_length)
    if not isinstance(sequences, torch.Tensor) or sequences.dtype not in (torch.int64, torch.int32):
        kind = sequences.dtype if isinstance(sequences, torch.Tensor) else type(sequences).__name__
        return Verdict(False, f"{path}: sequences() returns {kind}; token ids are an integer tensor (torch.long)")
    if tuple(sequences.shape) != shape:
        return Verdict(False, f"{path}: sequences() of {shape[0]} ids has shape {tuple(sequences.shape)}, not "
                              f"{shape} (prompt_length + answer_length tokens each)")  # fmt: skip
    outside = sequences[(sequences < 0) | (sequences >= task.vocab_size)]
    if len(outside):
        wrapped = " (take a digit plus one modulo 10)" if int(outside[0]) == task.vocab_size == 10 else ""
        return Verdict(False, f"{path}: sequences() holds token {int(outside[0])}; the vocabulary's ids are 0 to "
                              f"{task.vocab_size - 1}{wrapped}")  # fmt: skip
    torch.manual_seed(0)
    model = GPT(task.model_config(**SHAPE))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(STEPS):
        batch = task.batch(BATCH, generator)
        loss = model(batch.inputs, batch.targets).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    metrics = task.evaluate(model, "heldout", torch.device("cpu"), EVAL_LIMIT)
    figure = (f"held-out exact match {metrics['exact_match']:.3f} on {int(metrics['examples'])} examples, loss "
              f"{losses[0]:.2f} -> {losses[-1]:.2f} in {STEPS} steps")  # fmt: skip
    if not losses[-1] < LEARNED * losses[0]:
        return Verdict(False, f"task: {task.name} does not train: {figure}; can the answer be read from the prompt?")
    return Verdict(True, f"task: passed, {task.name} registered and trained, {figure}")
