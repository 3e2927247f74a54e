"""Task probes: the optional contract, and what the built-in probes of sort, addition and modadd measure."""

from __future__ import annotations

import pytest
import torch

from gpt_core import GPT, block_hook
from gpt_tasks import PROBE_EXAMPLES, ProbeCache, Task, get_task, is_heldout, measure_probes
from gpt_tasks.builtin.modadd import FOURIER_SHARE, fourier_spectrum, top_frequency_share
from gpt_tasks.builtin.sort import SortTask, source_attention


class NoProbes(SortTask):
    """A task that keeps the contract's default probes."""

    probes = Task.probes


class Untouchable(torch.nn.Module):
    """A model that fails if anything runs it."""

    def __call__(self, *args, **kwargs):
        raise AssertionError("a task without probes must not run the model")

    def run_with_cache(self, *args, **kwargs):
        raise AssertionError("a task without probes must not run the model")


def test_a_task_without_probes_measures_nothing_and_runs_nothing():
    task = NoProbes(get_task("sort", length=4).params)
    assert Task.probes(task, Untouchable(), None) == {}
    assert measure_probes(task, Untouchable(), "cpu") == {}


def test_prompt_answer_probe_batch_is_a_fixed_heldout_sample_scored_on_the_answer(sort_task):
    first, again = sort_task.probe_batch(), sort_task.probe_batch()
    assert torch.equal(first.inputs, again.inputs) and torch.equal(first.targets, again.targets)
    digits = first.inputs[:, :6]
    assert len(digits) == PROBE_EXAMPLES
    assert all(is_heldout(bytes(row), 0.25, b"sort") for row in digits.tolist())
    assert torch.equal(first.targets[:, sort_task.answer_queries()], digits.sort(dim=1).values)


def sort_cache(task: SortTask, patterns: list[torch.Tensor]) -> ProbeCache:
    return ProbeCache(task.probe_batch(), {block_hook(layer, "pattern"): p for layer, p in enumerate(patterns)})


def uniform_causal_pattern(n: int, n_head: int, length: int) -> torch.Tensor:
    """Every head reads every position it may see alike: (n, H, T, T)."""
    causal = torch.ones(length, length).tril()
    return (causal / causal.sum(dim=1, keepdim=True)).expand(n, n_head, length, length).clone()


def test_sort_source_attention_is_one_for_a_head_that_reads_the_source_alone():
    task = get_task("sort", length=6)
    model = GPT(task.defaults().model)  # 2 layers, 4 heads
    batch = task.probe_batch()
    n, length = batch.inputs.shape
    pointing = torch.zeros(n, 4, length, length)
    queries = range(task.answer_queries().start, task.answer_queries().stop)
    for row in range(n):
        for query in queries:
            digit = batch.targets[row, query]
            source = int((batch.inputs[row, :6] == digit).nonzero()[0])  # the first input holding the digit
            pointing[row, 2, query, source] = 1.0
    uniform = uniform_causal_pattern(n, 4, length)
    second = uniform.clone()
    second[:, 2] = pointing[:, 2]  # layer 1, head 2 points at the source; every other head reads all alike
    probes = task.probes(model, sort_cache(task, [uniform, second]))
    assert probes == {"source_attention": pytest.approx(1.0)}


def test_sort_source_attention_of_heads_that_read_everything_alike_is_the_share_of_source_positions():
    task = get_task("sort", length=6)
    model = GPT(task.defaults().model)
    batch = task.probe_batch()
    n, length = batch.inputs.shape
    uniform = uniform_causal_pattern(n, 4, length)
    expected = []
    for query in range(task.answer_queries().start, task.answer_queries().stop):
        copies = (batch.inputs[:, :6] == batch.targets[:, query : query + 1]).sum(dim=1).double()  # (n,)
        expected.append(float((copies / (query + 1)).mean()))
    probes = task.probes(model, sort_cache(task, [uniform, uniform]))
    assert probes["source_attention"] == pytest.approx(sum(expected) / len(expected), rel=1e-6)
    assert 0.1 < probes["source_attention"] < 0.2  # about 1.1 copies among 6 .. 11 positions read


def test_sort_probe_reads_the_attention_the_model_computes(sort_task):
    torch.manual_seed(0)
    model = GPT(sort_task.defaults().model).eval()
    measured = measure_probes(sort_task, model, "cpu")
    batch = sort_task.probe_batch()
    with torch.no_grad():
        names = [block_hook(layer, "pattern") for layer in range(model.config.n_layer)]
        _, recorded = model.run_with_cache(batch.inputs, names)
    by_hand = sort_cache(sort_task, [recorded[name] for name in names])  # each (N, H, T, T)
    expected = source_attention(sort_task, model, by_hand).flatten(0, 1).amax(dim=0).mean()
    assert measured == {"source_attention": pytest.approx(float(expected), rel=1e-6)}


def test_addition_carries_are_found_digit_by_digit():
    task = get_task("addition", digits=3)  # sum written units first
    inputs = torch.tensor([task.encode("199+001=002"), task.encode("123+456=975")])  # 200 and 579, minus last
    assert task.carries(inputs).tolist() == [[False, True, True, False], [False, False, False, False]]
    forward = get_task("addition", digits=3, reverse=False)
    assert forward.carries(torch.tensor([forward.encode("199+001=020")])).tolist() == [[False, True, True, False]]


def test_addition_probes_score_carried_and_uncarried_digits_apart():
    task = get_task("addition", digits=3)
    model = GPT(task.defaults().model)
    batch = task.probe_batch()
    carried = task.carries(batch.inputs)  # (N, 4)
    queries = task.answer_queries()
    answer = batch.targets[:, queries]
    predicted = torch.where(carried, answer, (answer + 1) % 10)  # right exactly where a carry comes in
    logits = torch.zeros(*batch.inputs.shape, task.vocab_size)
    logits[:, queries] = torch.nn.functional.one_hot(predicted, task.vocab_size).float()
    probes = task.probes(model, ProbeCache(batch, {"logits": logits}))
    assert probes == {"carry_digit_accuracy": 1.0, "no_carry_digit_accuracy": 0.0}
    assert 0 < int(carried.sum()) < carried.numel()  # both kinds are present in the probe batch


def test_modadd_probe_is_the_embeddings_fourier_share_and_reads_weights_only(modadd_task):
    torch.manual_seed(0)
    model = GPT(modadd_task.defaults().model)
    assert modadd_task.probe_batch() is None
    share = top_frequency_share(fourier_spectrum(model.wte.weight[: modadd_task.params.p]))
    assert measure_probes(modadd_task, model, "cpu") == {FOURIER_SHARE: share}
