"""Every tensor a task makes names its device: the device of the tensors it is combined with, or the CPU for
examples and batches, which the evaluation moves to the model's device itself.

A factory that names none (`torch.arange(n)`) lands on the default device: the CPU, where the tests run, so
such a call passes them and then fails on CUDA, where it meets the model's tensors. Here the default device is
the meta device while the model and the task sit on the CPU, so such a call fails on the CPU too (or gives
numbers other than the CPU's, which the tests compare).
"""

from __future__ import annotations

import pytest
import torch

from gpt_tasks import Task, get_task, measure_probes
from gpt_tasks.builtin.modadd import fourier_spectrum
from gpt_tasks.builtin.progress_measures import ProgressMeasures, key_frequencies, sum_waves

LIMIT = 16
"""Examples (or text windows) each evaluation scores: enough to cross every code path, quick on a CPU."""
BUILTINS = ("addition", "modadd", "repeats", "shakespeare", "sort", "text")  # test_defaults pins the list


@pytest.fixture(params=BUILTINS)
def task(request, builtin_tasks) -> Task:
    """Each built-in task in turn, newly built where it keeps what its first call makes (repeats, the text ones)."""
    return next(task for task in builtin_tasks if task.name == request.param)


def evaluations_and_probes(task, model) -> dict:
    """Every split's metrics of `model` on a fixed sample of LIMIT, and its probes, all on the CPU."""
    measured = {split: task.evaluate(model, split, "cpu", LIMIT) for split in ("train", "heldout")}
    return measured | {"probes": measure_probes(task, model, "cpu")}


def test_every_tasks_evaluation_and_probes_make_no_tensor_without_naming_its_device(task, tiny_model):
    model = tiny_model(task)
    with torch.device("meta"):  # first, so that what a task keeps after its first call is made here
        on_meta = evaluations_and_probes(task, model)
    assert on_meta == evaluations_and_probes(task, model)


def test_every_tasks_batches_and_examples_are_made_on_the_cpu_whatever_the_default_device(task):
    with torch.device("meta"):
        batch = task.batch(8, torch.Generator().manual_seed(0))
        texts = task.attention_examples(2), task.example_prompts()
    expected = task.batch(8, torch.Generator().manual_seed(0))
    assert batch.inputs.device.type == batch.targets.device.type == "cpu"
    assert torch.equal(batch.inputs, expected.inputs) and torch.equal(batch.targets, expected.targets)
    assert texts == (task.attention_examples(2), task.example_prompts())


def test_fourier_spectrum_and_the_progress_measures_make_no_tensor_without_naming_its_device(tiny_model):
    task = get_task("modadd", p=13)
    model = tiny_model(task)
    embedding = model.wte.weight[: task.params.p]

    def measures() -> tuple:
        frequencies = key_frequencies(embedding, share=0.0)  # every frequency, so that each wave is made
        return (
            fourier_spectrum(embedding).tolist(),
            sum_waves(task.params.p, frequencies).tolist(),
            ProgressMeasures.of(model, task, frequencies),
            ProgressMeasures.of(model, task, []),  # no key frequency: an empty basis
        )

    with torch.device("meta"):
        on_meta = measures()
    assert on_meta == measures()
