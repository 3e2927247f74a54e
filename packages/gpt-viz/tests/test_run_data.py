"""Reading run directories, and the one-line errors for malformed ones."""

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpt_viz import (
    ATTENTION_BUDGET,
    AttentionSnapshot,
    RunLayout,
    VizError,
    attention_lengths_within_budget,
    available_metrics,
    load_attention,
    load_attention_examples,
    load_config,
    load_metrics,
    metric_series,
    run_data,
    save_attention_examples,
)


def test_load_metrics_returns_one_record_per_line_in_file_order(run_dir):
    records = load_metrics(run_dir)
    assert len(records) == 51
    assert [r["step"] for r in records[:3]] == [0, 10, 20]


def test_metric_series_has_only_the_evaluation_points(run_dir):
    records = load_metrics(run_dir)
    loss_steps, _ = metric_series(records, "loss")
    steps, values = metric_series(records, "heldout_exact_match")
    assert len(loss_steps) == 51
    assert steps.tolist() == list(range(0, 501, 50))
    assert values.dtype == np.float64


def test_metric_series_skips_null_values():
    records = [{"step": 0, "loss": 1.0}, {"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]
    steps, values = metric_series(records, "loss")
    assert steps.tolist() == [0, 2]
    assert values.tolist() == [1.0, 0.5]


def test_available_metrics_excludes_step_and_elapsed(run_dir, metrics):
    assert available_metrics(load_metrics(run_dir)) == metrics


def test_unknown_metric_is_named_with_the_metrics_the_run_has(run_dir):
    with pytest.raises(VizError) as error:
        metric_series(load_metrics(run_dir), "heldout_bits_per_char", source=str(run_dir))
    message = str(error.value)
    assert "'heldout_bits_per_char'" in message
    assert str(run_dir) in message
    assert "heldout_exact_match, heldout_loss, loss, lr" in message


def test_missing_run_directory_is_reported(tmp_path):
    with pytest.raises(VizError, match=r"run directory .*nowhere does not exist"):
        load_metrics(tmp_path / "nowhere")


def test_missing_metrics_file_is_reported(run_dir):
    RunLayout(run_dir).metrics.unlink()
    with pytest.raises(VizError, match=r"metrics\.jsonl is missing$"):
        load_metrics(run_dir)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_metrics_file_is_reported(run_dir, content):
    RunLayout(run_dir).metrics.write_text(content)
    with pytest.raises(VizError, match=r"metrics\.jsonl is empty$"):
        load_metrics(run_dir)


def test_invalid_json_line_names_the_file_and_line_number(run_dir):
    path = RunLayout(run_dir).metrics
    lines = path.read_text().splitlines()
    lines[2] = '{"step": 20, "loss": '
    path.write_text("\n".join(lines))
    with pytest.raises(VizError) as error:
        load_metrics(run_dir)
    assert str(path) in str(error.value)
    assert "line 3 is not valid JSON" in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", ["9" * 5000, "[" * 100_000 + "]" * 100_000], ids=["5,000 digits", "deep"])
def test_json_python_cannot_read_is_one_line_naming_the_file(run_dir, value):
    """An integer past 4,300 digits raised ValueError, nesting past the stack RecursionError: tracebacks."""
    layout = RunLayout(run_dir)
    layout.config.write_text(f'{{"task": {value}}}')
    with pytest.raises(VizError, match="config.json is not JSON Python reads"):
        load_config(run_dir)
    layout.metrics.write_text(layout.metrics.read_text() + f'{{"step": 999, "loss": {value}}}\n')
    with pytest.raises(VizError, match="metrics.jsonl line [0-9]+ is not JSON Python reads") as error:
        load_metrics(run_dir)
    assert "\n" not in str(error.value)


def test_an_unfinished_last_line_is_left_out_as_a_run_still_writing_it(run_dir):
    """A run appends a line at a time: a reader can meet the last one half-written, before its newline."""
    path = RunLayout(run_dir).metrics
    whole = load_metrics(run_dir)
    path.write_text(path.read_text() + '{"step": 999, "lo')
    assert load_metrics(run_dir) == whole
    path.write_text(path.read_text() + "\n")  # ended by a newline, the line is damage, not a line being written
    with pytest.raises(VizError, match=f"line {len(whole) + 1} is not valid JSON"):
        load_metrics(run_dir)


@pytest.mark.parametrize(("line", "problem"), [("[1, 2]", "is not a JSON object"), ('{"loss": 1.0}', 'has no "step"')])
def test_line_that_is_not_a_step_record_is_reported(run_dir, line, problem):
    RunLayout(run_dir).metrics.write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n" + line + "\n")
    with pytest.raises(VizError, match=f"line 2 {problem}"):
        load_metrics(run_dir)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"step": "ten", "loss": 1.0}', 'step is "ten", not an integer'),
        ('{"step": 10.0, "loss": 1.0}', "step is 10.0, not an integer"),
        ('{"step": 2, "loss": "high"}', 'loss is "high", not a number'),
        ('{"step": 2, "loss": true}', "loss is true, not a number"),
        ('{"step": 0, "loss": 9.2}', "step 0 comes after step 1"),
        (
            '{"step": 2, "loss": 1' + "0" * 400 + "}",
            r"loss is 10{23}\.\.\. \(401 characters\), more than a float64 holds",
        ),
        ('{"step": 100000000000000000000000, "loss": 1.0}', "step is 100000000000000000000000, more than an int64 hol"),
    ],
)
def test_a_value_that_is_not_a_number_or_a_step_out_of_order_is_refused_by_every_reader(run_dir, line, problem):
    """explore left such a line out in silence while curves refused it; a step going back drew the line back."""
    RunLayout(run_dir).metrics.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n" + line + "\n")
    with pytest.raises(VizError, match=f"line 2: {problem}"):
        load_metrics(run_dir)


def test_null_stands_for_a_value_that_was_not_finite(run_dir):
    RunLayout(run_dir).metrics.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 1.0, "heldout_loss": null}\n')
    assert load_metrics(run_dir)[1]["heldout_loss"] is None


def test_a_metric_never_finite_is_refused_by_name_not_drawn_as_an_empty_picture(run_dir):
    """A loss of NaN at every step drew an empty axis and exited 0; null at every step was "not found", though
    listed as there."""
    RunLayout(run_dir).metrics.write_text(
        '{"step": 1, "loss": NaN, "heldout_loss": null}\n{"step": 2, "loss": NaN, "heldout_loss": null}\n'
    )
    records = load_metrics(run_dir)
    with pytest.raises(VizError, match=r"^metric 'loss' in the records is not finite at any of its 2 steps"):
        metric_series(records, "loss")
    with pytest.raises(VizError, match=r"^metric 'heldout_loss' not found in the records; it has: loss$"):
        metric_series(records, "heldout_loss")


def test_missing_config_reads_as_empty_so_old_runs_still_plot(run_dir):
    RunLayout(run_dir).config.unlink()
    assert load_config(run_dir) == {}


def test_invalid_config_is_reported(run_dir):
    RunLayout(run_dir).config.write_text("{task:")
    with pytest.raises(VizError, match=r"config\.json is not valid JSON"):
        load_config(run_dir)


def test_load_attention_reads_weights_and_token_labels(run_dir):
    snapshot = load_attention(run_dir)
    assert snapshot.weights.shape == (2, 4, 10, 10)
    assert snapshot.tokens[:3] == ["1", "2", "+"]


def test_every_attention_example_reads_back_at_its_own_length(run_dir, attention_examples):
    examples = load_attention_examples(run_dir)
    assert [len(example.tokens) for example in examples] == [10, 7, 10]
    for example, expected in zip(examples, attention_examples, strict=True):
        assert example.tokens == expected.tokens
        np.testing.assert_array_equal(example.weights, expected.weights)
    np.testing.assert_array_equal(load_attention(run_dir).weights, attention_examples[0].weights)


def test_the_attention_file_pads_shorter_examples_to_the_longest(run_dir):
    with np.load(RunLayout(run_dir).attention) as archive:
        weights, tokens, lengths = archive["weights"], archive["tokens"], archive["lengths"]
    assert weights.shape == (3, 2, 4, 10, 10) and weights.dtype == np.float16
    assert tokens.shape == (3, 10) and lengths.tolist() == [10, 7, 10]
    assert tokens[1, 7:].tolist() == ["", "", ""] and not weights[1, :, :, 7:].any() and not weights[1, ..., 7:].any()


def test_attention_is_stored_compressed_as_float16_and_read_back_as_float32(make_run, layer_weights, tokens):
    run = make_run(attention=False)
    weights = np.stack([layer_weights, layer_weights[::-1]])  # (2, 4, T, T) float32
    save_attention_examples(run, [AttentionSnapshot(weights, tokens)])
    with zipfile.ZipFile(RunLayout(run).attention) as archive:
        assert {member.compress_type for member in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    (example,) = load_attention_examples(run)
    assert example.weights.dtype == np.float32
    np.testing.assert_array_equal(example.weights, weights.astype(np.float16).astype(np.float32))
    assert np.abs(example.weights - weights).max() <= 2**-12  # half float16's spacing just below 1


def test_an_uncompressed_float32_attention_file_of_several_examples_still_reads(run_dir, attention_examples):
    weights = np.zeros((2, 2, 4, 10, 10), dtype=np.float32)  # as runs wrote it before float16
    weights[0] = attention_examples[0].weights
    weights[1, :, :, :7, :7] = attention_examples[1].weights
    tokens = np.array([attention_examples[0].tokens, attention_examples[1].tokens + [""] * 3])
    np.savez(RunLayout(run_dir).attention, weights=weights, tokens=tokens, lengths=np.array([10, 7]))
    first, second = load_attention_examples(run_dir)
    assert first.weights.dtype == second.weights.dtype == np.float32
    np.testing.assert_array_equal(first.weights, attention_examples[0].weights)
    np.testing.assert_array_equal(second.weights, attention_examples[1].weights)


def test_attention_weights_that_are_not_numbers_are_one_line(run_dir, tokens):
    weights = np.full((1, 1, 1, 10, 10), "x")
    np.savez(RunLayout(run_dir).attention, weights=weights, tokens=np.array([tokens]), lengths=np.array([10]))
    with pytest.raises(VizError, match=r"attention\.npz: weights are not numbers \(<U1\)"):
        load_attention(run_dir)


@pytest.mark.parametrize(
    ("lengths", "n_layer", "n_head", "kept"),
    [
        ([11, 11, 11, 11], 2, 4, [11, 11, 11, 11]),  # the default sort model: all four, far below the budget
        ([256, 256, 256, 256], 6, 6, [256]),  # 6 x 6 heads at T = 256: one example (2.4M weights), not two (4.7M)
        ([1024, 1024], 12, 12, [170]),  # GPT-2 at T = 1,024: the first example's last 170 tokens, 170² x 144 ≤ 4M
        ([100, 1448, 100], 1, 1, [100, 1448]),  # 2 x 1448², padded to the longest, fits; 3 x 1448² does not
        ([100, 1449, 100], 1, 1, [100]),  # 2 x 1449² does not; the examples after it are not tried
        ([5000, 3], 1, 1, [2048]),  # a first example beyond the budget alone is cut to fill it (2048² = 4M)
    ],
)
def test_examples_are_kept_in_order_while_their_padded_attention_fits_the_budget(lengths, n_layer, n_head, kept):
    assert ATTENTION_BUDGET == 4 * 2**20
    assert attention_lengths_within_budget(lengths, n_layer, n_head) == kept


def test_saving_more_attention_than_the_budget_is_refused(run_dir, monkeypatch, attention_examples):
    monkeypatch.setattr(run_data, "ATTENTION_BUDGET", 2 * 2 * 4 * 10 * 10)  # room for two 10-token examples
    assert attention_lengths_within_budget([10, 7, 10], 2, 4) == [10, 7]
    save_attention_examples(run_dir, attention_examples[:2])
    with pytest.raises(VizError, match=r"shape \(3, 2, 4, 10, 10\) exceed the file's budget of 1,600 weights"):
        save_attention_examples(run_dir, attention_examples)
    assert len(load_attention_examples(run_dir)) == 2  # the file written before is left as it was


def test_an_attention_file_of_one_example_with_four_axis_weights_is_refused(run_dir, layer_weights, tokens):
    weights = np.stack([layer_weights, layer_weights[::-1]])  # (L, H, T, T) with tokens (T,): no examples axis
    np.savez(RunLayout(run_dir).attention, weights=weights, tokens=np.array(tokens))
    with pytest.raises(VizError) as error:
        load_attention_examples(run_dir)
    message = str(error.value)
    expected = (
        f"{RunLayout(run_dir).attention}: weights have shape (2, 4, 10, 10); expected (examples, n_layer, n_head, T, T)"
    )
    assert message == expected
    assert "\n" not in message


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"tokens": np.array([["a", "b"]])}, "lacks the array 'lengths', which weights of five axes need"),
        ({"tokens": np.array([["a", "b"]]), "lengths": np.array([3])}, r"lengths must be one whole number from 1 to 2"),
        ({"tokens": np.array([["a", "b"]]), "lengths": np.array([0])}, r"from 1 to 2 per example, got \[0\]"),
        ({"tokens": np.array([["a", "b"]]), "lengths": np.array([1.5])}, "lengths must be one whole number"),
        ({"tokens": np.array([["a", "b"]]), "lengths": np.array([2, 2])}, "lengths must be one whole number"),
        ({"tokens": np.array(["a", "b"]), "lengths": np.array([2])}, r"tokens have shape \(2,\); expected \(1, 2\)"),
    ],
)
def test_a_five_axis_attention_file_needs_a_length_and_a_row_of_tokens_per_example(run_dir, arrays, message):
    np.savez(RunLayout(run_dir).attention, weights=np.full((1, 1, 1, 2, 2), 0.5), **arrays)
    with pytest.raises(VizError, match=message):
        load_attention_examples(run_dir)


def test_an_attention_file_with_no_examples_says_so(run_dir):
    empty = {"weights": np.zeros((0, 1, 1, 2, 2)), "tokens": np.zeros((0, 2), dtype=str), "lengths": np.zeros(0, int)}
    np.savez(RunLayout(run_dir).attention, **empty)
    with pytest.raises(VizError, match="holds no examples"):
        load_attention(run_dir)


def test_saving_attention_needs_well_shaped_examples_of_one_model(run_dir, attention_examples, tokens):
    with pytest.raises(VizError, match="no attention examples to save"):
        save_attention_examples(run_dir, [])
    other = AttentionSnapshot(attention_examples[1].weights[:1], attention_examples[1].tokens)  # one layer, not two
    with pytest.raises(VizError, match=r"disagree on \(n_layer, n_head\): \[\(1, 4\), \(2, 4\)\]"):
        save_attention_examples(run_dir, [attention_examples[0], other])
    with pytest.raises(VizError, match=r"shape \(4, 10, 10\) are not \(n_layer, n_head, T, T\)"):
        save_attention_examples(run_dir, [AttentionSnapshot(attention_examples[0].weights[0], tokens)])
    with pytest.raises(VizError, match="cover 10 positions but there are 7 tokens"):
        save_attention_examples(
            run_dir, [AttentionSnapshot(attention_examples[0].weights, attention_examples[1].tokens)]
        )


def test_missing_attention_file_is_reported(make_run):
    run = make_run(attention=False)
    with pytest.raises(VizError, match=r"attention\.npz is missing"):
        load_attention(run)


def test_attention_shape_that_does_not_match_the_tokens_is_rejected(run_dir):
    tokens = np.array([["a", "b", "c"]])
    np.savez(RunLayout(run_dir).attention, weights=np.zeros((1, 1, 2, 4, 4)), tokens=tokens, lengths=np.array([3]))
    with pytest.raises(VizError, match=r"tokens have shape \(1, 3\); expected \(1, 4\), one row per example"):
        load_attention(run_dir)


@pytest.mark.parametrize("shape", [(1, 1, 2, 3, 4), (1, 1, 2, 4, 3)], ids=["more keys", "more queries"])
def test_attention_that_is_not_square_is_rejected(run_dir, shape):
    """With more queries than keys, each example was cut to a square of its length and read as if it were one."""
    tokens = np.array([["a", "b", "c", "d"][: shape[-1]]])
    np.savez(RunLayout(run_dir).attention, weights=np.zeros(shape), tokens=tokens, lengths=np.array([3]))
    with pytest.raises(VizError, match=re.escape(f"weights have shape {shape}; expected (examples, n_layer,")):
        load_attention(run_dir)


def test_attention_without_layer_and_head_axes_is_rejected(run_dir):
    np.savez(RunLayout(run_dir).attention, weights=np.zeros((3, 3)), tokens=np.array(["a", "b", "c"]))
    with pytest.raises(VizError, match=r"weights have shape \(3, 3\); expected \(examples, n_layer, n_head, T, T\)$"):
        load_attention(run_dir)


def test_attention_archive_without_tokens_is_rejected(run_dir):
    np.savez(RunLayout(run_dir).attention, weights=np.zeros((1, 1, 1, 3, 3)), lengths=np.array([3]))
    with pytest.raises(VizError, match="lacks the array 'tokens'"):
        load_attention(run_dir)


def test_attention_with_pickled_tokens_is_refused(run_dir):
    tokens = np.array([["a", "b", "c"]], dtype=object)
    np.savez(RunLayout(run_dir).attention, weights=np.zeros((1, 1, 1, 3, 3)), tokens=tokens, lengths=np.array([3]))
    with pytest.raises(VizError, match=r"attention\.npz stores 'tokens' as pickled Python objects.*store tokens as"):
        load_attention(run_dir)


def test_metric_value_that_is_not_a_number_is_reported():
    records = [{"step": 0, "loss": 1.0}, {"step": 1, "loss": "low"}]
    with pytest.raises(VizError, match="metric 'loss' in run-7 has a step or value that is not a number"):
        metric_series(records, "loss", source="run-7")


INVALID_UTF8 = b'{"step": 0, "loss": 1.0}\n{"step": 1, "note": "\xff\xfe"}\n'


def test_metrics_that_are_not_utf8_name_the_file_and_the_byte(run_dir):
    RunLayout(run_dir).metrics.write_bytes(INVALID_UTF8)
    with pytest.raises(VizError, match=r"metrics\.jsonl is not UTF-8 text \(byte 0xff on line 2\)$"):
        load_metrics(run_dir)


def test_config_that_is_not_utf8_names_the_file(run_dir):
    RunLayout(run_dir).config.write_bytes(b'{"task": "\xe9"}')
    with pytest.raises(VizError, match=r"config\.json is not UTF-8 text"):
        load_config(run_dir)


@pytest.mark.parametrize(("reader", "name"), [(load_metrics, RunLayout.METRICS), (load_config, RunLayout.CONFIG)])
def test_a_file_that_cannot_be_read_names_the_file_and_the_reason(run_dir, monkeypatch, reader, name):
    def fail(self, *args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Path, "read_text", fail)
    monkeypatch.setattr(Path, "read_bytes", fail)
    with pytest.raises(VizError, match=f"cannot read {run_dir / name}: Input/output error$"):
        reader(run_dir)


@pytest.mark.parametrize(
    "content", [bytes(range(256)) * 4, b"weights,tokens\n1,a\n", b"PK\x03\x04 a zip cut short", b""]
)
def test_attention_file_that_is_no_npz_archive_says_so_and_blames_no_pickle(run_dir, content):
    RunLayout(run_dir).attention.write_bytes(content)
    with pytest.raises(VizError) as error:
        load_attention(run_dir)
    message = str(error.value)
    assert message.startswith(f"{RunLayout(run_dir).attention} is not a readable .npz archive")
    assert "pickle" not in message
    assert "store tokens as strings" not in message
    assert "\n" not in message


def test_attention_saved_as_a_bare_npy_array_is_no_npz_archive(run_dir):
    with open(RunLayout(run_dir).attention, "wb") as file:
        np.save(file, np.zeros((1, 1, 1, 3, 3)))
    with pytest.raises(VizError, match=r"attention\.npz is not a readable \.npz archive"):
        load_attention(run_dir)


def test_each_examples_prompt_length_is_kept_and_read_back(make_run, attention_examples):
    run = make_run(attention=False)
    first, second, third = attention_examples
    save_attention_examples(run, [first._replace(prompt_length=3), second, third._replace(prompt_length=10)])
    assert [example.prompt_length for example in load_attention_examples(run)] == [3, None, 10]
    assert load_attention(run).prompt_length == 3


def test_an_attention_file_without_prompt_lengths_reads_as_not_knowing_them(run_dir, attention_examples):
    weights = np.zeros((1, 2, 4, 10, 10), dtype=np.float16)
    weights[0] = attention_examples[0].weights
    tokens = np.array([attention_examples[0].tokens])
    np.savez_compressed(RunLayout(run_dir).attention, weights=weights, tokens=tokens, lengths=np.array([10]))
    assert [example.prompt_length for example in load_attention_examples(run_dir)] == [None]


@pytest.mark.parametrize(
    "prompt_lengths", [np.array([11, 0, 0]), np.array([-1, 0, 0]), np.array([1.5, 0, 0]), np.array([1])]
)
def test_prompt_lengths_outside_their_examples_are_one_line(run_dir, prompt_lengths):
    with np.load(RunLayout(run_dir).attention) as archive:
        arrays = {name: archive[name] for name in ("weights", "tokens", "lengths")}
    np.savez_compressed(RunLayout(run_dir).attention, prompt_lengths=prompt_lengths, **arrays)
    with pytest.raises(VizError, match="prompt_lengths must be one whole number from 0 to its example's length"):
        load_attention_examples(run_dir)


@pytest.mark.parametrize("prompt_length", [0, 11, 2.5])
def test_saving_a_prompt_length_outside_its_example_is_refused(run_dir, attention_examples, prompt_length):
    example = attention_examples[0]._replace(prompt_length=prompt_length)
    with pytest.raises(VizError, match=f"prompt length {prompt_length} is not a whole number from 1 to the 10 tokens"):
        save_attention_examples(run_dir, [example])
