"""What a finished run keeps of its model's attention: the task's first few held-out attention examples, each the
model's own attention on it, at its own length."""

from __future__ import annotations

import numpy as np
import torch

from gpt_core import GPT
from gpt_tasks import get_task
from gpt_tasks.builtin.sort import SortTask
from gpt_train.loading import load_run
from gpt_train.pictures import ATTENTION_EXAMPLES, prompt_tokens, save_attention
from gpt_viz import RunLayout, load_attention_examples, run_data

CPU = torch.device("cpu")


def model_attention(model: GPT, ids: list[int]) -> np.ndarray:
    """(n_layer, n_head, T, T) of `model` on `ids`, computed here from each layer's `pattern` hook."""
    model.eval()
    names = [f"blocks.{layer}.pattern" for layer in range(model.config.n_layer)]
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([ids]), names=names)
    return torch.stack([cache[name][0] for name in names]).numpy()


def as_stored(weights: np.ndarray) -> np.ndarray:
    """``weights`` rounded as attention.npz stores them (float16) and read back (float32)."""
    return weights.astype(np.float16).astype(np.float32)


def recording_lengths(model: GPT) -> list[int]:
    """The sequence length of every forward pass `model` makes from now on."""
    lengths: list[int] = []
    forward = model.forward
    model.forward = lambda idx, **kwargs: (lengths.append(idx.shape[1]), forward(idx, **kwargs))[1]
    return lengths


def test_a_finished_run_keeps_the_models_attention_on_the_tasks_first_examples(tiny_run):
    run = load_run(tiny_run, CPU)
    task, model = run.task, run.model
    texts = task.attention_examples(ATTENTION_EXAMPLES)
    examples = load_attention_examples(tiny_run)
    assert len(examples) == ATTENTION_EXAMPLES == 4
    for example, text in zip(examples, texts, strict=True):
        ids = task.encode(text)
        assert example.tokens == task.token_labels(ids)
        np.testing.assert_allclose(example.weights, model_attention(model, ids), rtol=0, atol=2**-12 + 1e-6)  # float16


class UnevenSort(SortTask):
    """Attention examples of three lengths, the last longer than the model's block (sort length 4: 7 tokens)."""

    name = "uneven_sort"

    def attention_examples(self, n: int) -> list[str]:
        return ["3141", "27", "1234567890"][:n]


def test_examples_of_different_lengths_are_kept_each_at_its_own_length_and_cut_to_the_block(tmp_path):
    task = UnevenSort(get_task("sort", length=4).params)
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=2, n_head=2, n_embd=16))
    save_attention(task, model, CPU, RunLayout(tmp_path))
    examples = load_attention_examples(tmp_path)
    assert [example.tokens for example in examples] == [list("3141"), list("27"), list("1234567")]
    for example in examples:
        ids = task.encode("".join(example.tokens))
        np.testing.assert_array_equal(example.weights, as_stored(model_attention(model, ids)))


def test_a_model_too_large_for_every_example_keeps_the_first_ones_that_fit_and_computes_no_other(tmp_path, monkeypatch):
    monkeypatch.setattr(run_data, "ATTENTION_BUDGET", 2 * 2 * 2 * 4**2)  # 2 layers x 2 heads: "3141" and "27"
    task = UnevenSort(get_task("sort", length=4).params)
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=2, n_head=2, n_embd=16))
    lengths = recording_lengths(model)
    save_attention(task, model, CPU, RunLayout(tmp_path))
    assert lengths == [4, 2]  # the third example (7 tokens) would need 3 x 4 x 7² weights: never computed
    examples = load_attention_examples(tmp_path)
    assert [example.tokens for example in examples] == [list("3141"), list("27")]
    for example in examples:
        np.testing.assert_array_equal(
            example.weights, as_stored(model_attention(model, task.encode("".join(example.tokens))))
        )


def test_a_first_example_too_long_for_the_budget_keeps_its_last_tokens_and_the_models_attention_on_them(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(run_data, "ATTENTION_BUDGET", 2 * 2 * 3**2)  # 2 layers x 2 heads x 3 x 3: three tokens
    task = UnevenSort(get_task("sort", length=4).params)
    torch.manual_seed(0)
    model = GPT(task.model_config(n_layer=2, n_head=2, n_embd=16))
    lengths = recording_lengths(model)
    save_attention(task, model, CPU, RunLayout(tmp_path))
    assert lengths == [3]
    (example,) = load_attention_examples(tmp_path)
    assert example.tokens == list("141")  # the last three of "3141"
    np.testing.assert_array_equal(example.weights, as_stored(model_attention(model, task.encode("141"))))


def test_each_kept_example_records_where_its_prompt_ends(tiny_run):
    """A sort example of 4 digits is its 4 prompt digits, then its answer: the pictures mark the line between."""
    examples = load_attention_examples(tiny_run)
    assert [len(example.tokens) for example in examples] == [7] * ATTENTION_EXAMPLES
    assert [example.prompt_length for example in examples] == [4] * ATTENTION_EXAMPLES


def test_an_example_cut_for_the_budget_keeps_the_prompt_tokens_left_and_other_tasks_record_none():
    sort, modadd = get_task("sort", length=4), get_task("modadd", p=11)
    cuts = ((0, 7), (1, 6), (3, 4), (4, 3), (0, 2))  # (tokens dropped from the front, tokens kept)
    assert [prompt_tokens(sort, dropped, kept) for dropped, kept in cuts] == [4, 3, 1, None, 2]
    assert prompt_tokens(modadd, 0, 3) is None  # modadd is read whole by its own rule, not as a prompt and answer
