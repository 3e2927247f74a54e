"""The explorer page without a browser: what it embeds, that it fetches nothing, that token text stays text,
and that bad input is one line."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fixture_records import HEADS_ABLATION

from gpt_viz import AttentionSnapshot, RunLayout, VizError, load_attention_examples, save_attention_examples
from gpt_viz.cli import main
from gpt_viz.explore import MOST_POINTS, attention_data, explorer_page, write_explorer

DATA_ELEMENT = re.compile(r'<script type="application/json" id="run-data">(.*?)</script>', re.S)
ABLATION = HEADS_ABLATION


def uniform_causal(n_layer: int, n_head: int, length: int) -> np.ndarray:
    """Each query spreading its attention evenly over itself and the positions before it."""
    rows = np.tril(np.ones((length, length), dtype=np.float32))
    return np.broadcast_to(rows / rows.sum(axis=1, keepdims=True), (n_layer, n_head, length, length)).copy()


def write_attention_file(run: Path, weights: np.ndarray, tokens: list[str]) -> None:
    """One example's ``weights`` (n_layer, n_head, T, T) written as they are (float32, unchecked) in attention.npz's
    layout: (1, n_layer, n_head, T, T), tokens (1, T), lengths (1,), and no prompt_lengths."""
    arrays = {"weights": weights[None], "tokens": np.array([tokens]), "lengths": np.array([len(tokens)])}
    np.savez(RunLayout(run).attention, **arrays)


def logged(run: Path) -> list[dict]:
    return [json.loads(line) for line in RunLayout(run).metrics.read_text().splitlines()]


def embedded(page: str) -> dict:
    """The data the page carries, read back as the browser's JSON.parse would (NaN would be refused)."""
    (text,) = DATA_ELEMENT.findall(page)
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the page's JSON"))


def embedded_levels(example: dict) -> np.ndarray:
    """The page's bytes for an example's weights, (n_layer, n_head, T, T): each a fraction 0..255 of its row's max."""
    return np.frombuffer(base64.b64decode(example["weights"]), dtype=np.uint8).reshape(example["shape"])


def embedded_weights(example: dict) -> np.ndarray:
    """An example's weights as the page's script rebuilds them from its bytes and row maxima."""
    row_max = np.frombuffer(base64.b64decode(example["row_max"]), dtype="<f4").reshape(example["shape"][:3])
    return embedded_levels(example) / 255 * row_max[..., None]


def assert_quantised_from(example: dict, weights: np.ndarray) -> None:
    """The page's weights are ``weights`` to within 1/510 of each row's largest (half a level), no coarser."""
    error = np.abs(embedded_weights(example) - weights)  # (L, H, T, T)
    assert np.all(error <= weights.max(axis=-1, keepdims=True) / 510 + 1e-7)


def write_ablation(run: Path, table: object) -> None:
    RunLayout(run).heads_ablation.write_text(json.dumps(table))


def test_page_embeds_every_head_of_every_layer_of_every_example_to_a_byte_a_weight(run_dir, attention_examples):
    examples = embedded(explorer_page(run_dir))["attention"]
    assert len(examples) == len(attention_examples) == 3
    for example, expected in zip(examples, attention_examples, strict=True):
        length = len(expected.tokens)  # 10, 7, 10: the shorter one without the file's padding
        assert example["tokens"] == expected.tokens
        assert example["shape"] == [2, 4, length, length]
        assert embedded_levels(example).size == expected.weights.size  # one byte a weight
        assert_quantised_from(example, expected.weights)


def test_each_rows_largest_weight_is_level_255_and_a_diffuse_row_keeps_its_detail(make_run):
    run = make_run(attention=False)
    weights = np.zeros((1, 1, 3, 3), dtype=np.float32)
    weights[0, 0] = [[1, 0, 0], [0.9, 0.1, 0], [0.0021, 0.0013, 0.0006]]  # the last row, all small, still resolved
    save_attention_examples(run, [AttentionSnapshot(weights, ["a", "b", "c"])])
    (example,) = embedded(explorer_page(run))["attention"]
    stored = load_attention_examples(run)[0].weights
    assert embedded_levels(example)[0, 0].max(axis=-1).tolist() == [255, 255, 255]
    assert embedded_levels(example)[0, 0, 2].tolist() == [255, 158, 73]  # 0.0013 / 0.0021 of 255, 0.0006 / 0.0021
    assert_quantised_from(example, stored)


def test_the_page_carries_each_examples_prompt_length_and_none_for_a_text_window(make_run, attention_examples):
    run = make_run(attention=False)
    addition, text, whole_prompt = attention_examples  # "12+34=" then "46 $"; a text window; all of it prompt
    save_attention_examples(
        run, [addition._replace(prompt_length=6), text, whole_prompt._replace(prompt_length=len(whole_prompt.tokens))]
    )
    examples = embedded(explorer_page(run))["attention"]
    assert [example["prompt_length"] for example in examples] == [6, None, 10]


def test_an_attention_file_without_prompt_lengths_gives_none(run_dir, make_run, tokens):
    assert [example["prompt_length"] for example in embedded(explorer_page(run_dir))["attention"]] == [None] * 3
    run = make_run("without", attention=False)
    write_attention_file(run, uniform_causal(1, 1, len(tokens)), tokens)
    assert embedded(explorer_page(run))["attention"][0]["prompt_length"] is None


@pytest.mark.parametrize("prompt_length", ["3", 3.0, True, 0, -1, 11, [3], {"x": 3}])
def test_a_prompt_length_that_is_not_a_whole_number_of_the_examples_tokens_is_left_out(tokens, prompt_length):
    snapshot = AttentionSnapshot(uniform_causal(1, 1, len(tokens)), tokens, prompt_length)
    assert attention_data(snapshot)["prompt_length"] is None
    assert attention_data(snapshot._replace(prompt_length=np.int64(4)))["prompt_length"] == 4


def test_page_embeds_the_training_loss_and_summary_metrics_with_the_primary_one_chosen(make_run, run_dir, metrics):
    records = logged(run_dir)
    records[-1]["heldout_position_0_accuracy"] = 1.0  # a per-position detail: left out like in the summaries
    curves = embedded(explorer_page(make_run("edited", records=records)))["curves"]
    assert curves["primary"] == "heldout_exact_match"
    assert sorted(curves["series"]) == metrics
    steps, values = curves["series"]["heldout_loss"]
    assert steps == list(range(0, 501, 50))
    assert values == [record["heldout_loss"] for record in records if "heldout_loss" in record]


def test_non_finite_metric_values_become_gaps_so_the_json_stays_valid(make_run, run_dir):
    records = logged(run_dir)
    records[3]["loss"] = math.nan
    records[4]["loss"] = math.inf
    steps, values = embedded(explorer_page(make_run("edited", records=records)))["curves"]["series"]["loss"]
    assert len(steps) == len(records)
    assert values[3] is None and values[4] is None and values[5] == records[5]["loss"]


def test_a_long_run_draws_at_most_MOST_POINTS_a_series_keeping_its_spikes_ends_and_logged_count(make_run):
    """200,000 logged lines made a 12 MB page that took 36 ms a hover, for a canvas 1,100 pixels wide."""
    n = 20 * MOST_POINTS
    records = [{"step": step, "loss": 2.0 + math.sin(step)} for step in range(1, n + 1)]
    records[12_345]["loss"], records[23_456]["loss"] = 99.0, -5.0  # a spike and a dip inside one run each
    for step in range(30_000, 30_030):  # a stretch of non-finite losses, inside one run: the line breaks there
        records[step]["loss"] = math.nan
    records[-1]["heldout_loss"] = 1.5
    curves = embedded(explorer_page(make_run("long", records=records)))["curves"]
    steps, values = curves["series"]["loss"]
    assert len(steps) <= MOST_POINTS and steps == sorted(steps)
    assert steps[0] == 1 and steps[-1] == n and 99.0 in values and -5.0 in values
    assert all(value == records[step - 1]["loss"] for step, value in zip(steps, values, strict=True) if value)
    assert [step for step, value in zip(steps, values, strict=True) if value is None] == [30_001]
    assert curves["logged"] == {"loss": n, "heldout_loss": 1}
    assert curves["series"]["heldout_loss"] == [[n], [1.5]]


def test_a_series_of_MOST_POINTS_is_drawn_whole(make_run):
    records = [{"step": step, "loss": 1.0 / step} for step in range(1, MOST_POINTS + 1)]
    steps, _ = embedded(explorer_page(make_run("whole", records=records)))["curves"]["series"]["loss"]
    assert steps == list(range(1, MOST_POINTS + 1))


def test_a_metric_never_finite_is_left_out(make_run, run_dir):
    records = logged(run_dir)
    for record in records:
        if "heldout_loss" in record:
            record["heldout_loss"] = math.nan
    assert "heldout_loss" not in embedded(explorer_page(make_run("edited", records=records)))["curves"]["series"]


def test_a_primary_metric_the_run_never_logged_leaves_the_choice_to_the_page(make_run):
    run = make_run(config={"task": "sort", "primary_metric": "heldout_no_such_metric"})
    assert embedded(explorer_page(run))["curves"]["primary"] is None


def test_page_fetches_nothing_from_anywhere(run_dir):
    write_ablation(run_dir, ABLATION)
    page = explorer_page(run_dir).lower()
    for reference in ("http://", "https://", "//cdn", "src=", "<link", "@import", "url(", "fetch(", "xmlhttprequest"):
        assert reference not in page


def test_token_text_cannot_close_the_script_or_become_markup(make_run):
    tokens = ["</script>", "<img src=x onerror=alert(1)>", "&amp;", "<!--", '"', "\u2028", "é"]
    run = make_run(config={"task": "<b>sort</b>"}, attention=False)
    write_attention_file(run, uniform_causal(1, 2, len(tokens)), tokens)
    page = explorer_page(run)
    assert page.count("</script>") == 2  # the template's own two script elements, nothing from the data
    assert "<img" not in page and "<b>" not in page and "<!--" not in page
    assert "<title>&lt;b&gt;sort&lt;/b&gt; — run · gpt-viz explore</title>" in page
    data = embedded(page)
    assert data["attention"][0]["tokens"] == tokens
    assert data["title"] == "<b>sort</b> — run"


def test_a_run_named_like_the_templates_marker_keeps_its_name(make_run):
    page = explorer_page(make_run(name="x__DATA__", attention=False))
    assert "<title>addition — x__DATA__ · gpt-viz explore</title>" in page
    assert embedded(page)["title"] == "addition — x__DATA__"


def test_head_ablation_table_is_embedded_when_inspect_heads_has_run(run_dir):
    assert embedded(explorer_page(run_dir))["ablation"] is None
    write_ablation(run_dir, ABLATION)
    expected = ABLATION | {"step": None, "checkpoint_step": None, "higher_is_better": True}  # no checkpoint here
    assert embedded(explorer_page(run_dir))["ablation"] == expected


def test_the_page_opens_on_the_head_ablation_finds_most_needed_else_the_first_layer(run_dir):
    assert embedded(explorer_page(run_dir))["open"] == {"layer": 0, "head": 0, "by": "first layer"}
    write_ablation(run_dir, ABLATION)  # head 1.1 zero-ablated leaves 0.0
    assert embedded(explorer_page(run_dir))["open"] == {"layer": 1, "head": 1, "by": "ablation"}
    loss = ABLATION | {"higher_is_better": False}  # a lower-is-better metric: the head whose removal raises it most
    write_ablation(run_dir, loss)
    assert embedded(explorer_page(run_dir))["open"] == {"layer": 0, "head": 2, "by": "ablation"}


@pytest.mark.parametrize(("step", "checkpoint"), [(10, 30), (30, 30), (None, 30), (10, None), (30, 10)])
def test_the_page_says_which_checkpoint_a_head_ablation_table_describes(run_dir, step, checkpoint):
    """Against the run's checkpoint, which a run still training rewrites (final.json says nothing of it), as
    `gpt-train serve` compares."""
    layout = RunLayout(run_dir)
    if checkpoint is not None:  # a safetensors header: its length in 8 bytes, then JSON with gpt-train's metadata
        header = json.dumps({"__metadata__": {"task": "addition", "step": str(checkpoint)}}).encode()
        layout.checkpoint.write_bytes(len(header).to_bytes(8, "little") + header)
    write_ablation(run_dir, ABLATION | ({} if step is None else {"step": step}))
    page = explorer_page(run_dir)
    table = embedded(page)["ablation"]
    assert (table["step"], table["checkpoint_step"]) == (step, checkpoint)
    assert "The run's checkpoint is of step ${table.checkpoint_step} now" in page
    assert "table.step !== table.checkpoint_step" in page


@pytest.mark.parametrize(
    "header",
    [
        b"[" * 200_000,
        b'{"__metadata__": {"step": 1e400}}',
        b'{"__metadata__": {"step": "' + b"9" * 5000 + b'"}}',
        b'{"__metadata__": {"step": 30.9}}',
        b"\xff\xfe",
        b"{}",
    ],
)
def test_an_unreadable_checkpoint_header_leaves_the_table_unflagged_not_the_page_unwritten(run_dir, header):
    RunLayout(run_dir).checkpoint.write_bytes(len(header).to_bytes(8, "little") + header)
    write_ablation(run_dir, ABLATION | {"step": 10})
    assert embedded(explorer_page(run_dir))["ablation"]["checkpoint_step"] is None


def test_a_run_without_an_attention_file_yet_still_gets_curves(make_run):
    data = embedded(explorer_page(make_run(attention=False)))
    assert data["attention"] == []
    assert "loss" in data["curves"]["series"]


def test_write_explorer_puts_the_page_in_the_run_by_default(run_dir, tmp_path):
    assert write_explorer(run_dir) == run_dir / "explore.html"
    assert embedded((run_dir / "explore.html").read_text(encoding="utf-8"))["attention"]
    elsewhere = tmp_path / "pages" / "sort.html"
    assert write_explorer(run_dir, elsewhere) == elsewhere
    assert elsewhere.read_text(encoding="utf-8") == (run_dir / "explore.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("not json", "is not valid JSON"),
        ([1, 2], "must hold a JSON object"),
        ({**ABLATION, "metric": None}, 'needs "metric"'),
        ({**ABLATION, "baseline": "high"}, 'needs "baseline"'),
        ({**ABLATION, "baseline": 10**400}, 'needs "baseline"'),  # no float holds it: math.isfinite overflowed
        ({**ABLATION, "zero": [[0.1, 0.2, 0.3, 0.4], [0.1]]}, '"zero" must be a list per layer'),
        ({**ABLATION, "mean": [[0.1, None, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]]}, '"mean" must be a list per layer'),
        ({**ABLATION, "mean": []}, '"mean" must be a list per layer'),
        ({**ABLATION, "mean": [[0.1, 0.2, 0.3, 0.4]]}, '"zero" is (2, 4) layers x heads but "mean" is (1, 4)'),
        ({**ABLATION, "zero": [[0.1] * 3] * 2, "mean": [[0.1] * 3] * 2}, "covers (2, 3) layers x heads"),
    ],
)
def test_a_malformed_head_ablation_table_is_one_line_naming_the_file(run_dir, table, fragment):
    path = RunLayout(run_dir).heads_ablation
    path.write_text(table if isinstance(table, str) else json.dumps(table))
    with pytest.raises(VizError) as error:
        explorer_page(run_dir)
    assert str(path) in str(error.value) and fragment in str(error.value)
    assert "\n" not in str(error.value)


def test_attention_weights_that_are_not_finite_are_refused(make_run, tokens):
    run = make_run(attention=False)
    weights = uniform_causal(1, 2, len(tokens))
    weights[0, 1, 3, 0] = np.nan
    write_attention_file(run, weights, tokens)
    with pytest.raises(VizError, match="NaN or infinite"):
        explorer_page(run)


def test_negative_attention_weights_are_refused(make_run, tokens):
    run = make_run(attention=False)
    weights = uniform_causal(1, 2, len(tokens))
    weights[0, 1, 3, 0] = -0.25
    write_attention_file(run, weights, tokens)
    with pytest.raises(VizError, match="attention.npz: weights hold negative values; attention weights are prob"):
        explorer_page(run)


@pytest.fixture
def runner() -> CliRunner:
    """A runner that keeps stderr apart from stdout (click 8.1 needs asking; 8.2+ always does)."""
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def test_explore_command_writes_the_page_and_prints_its_path(runner, run_dir, tmp_path):
    result = runner.invoke(main, ["explore", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{run_dir / 'explore.html'}\n"
    out = tmp_path / "page.html"
    result = runner.invoke(main, ["explore", str(run_dir), "--out", str(out)])
    assert result.stdout == f"{out}\n"
    assert embedded(out.read_text(encoding="utf-8"))["attention"]


def _garbage_attention(run: Path) -> None:
    RunLayout(run).attention.write_bytes(bytes(range(256)) * 4)


def _no_metrics(run: Path) -> None:
    RunLayout(run).metrics.unlink()


def _metrics_without_loss(run: Path) -> None:
    RunLayout(run).metrics.write_text('{"step": 0, "heldout_accuracy": 0.5}\n')


@pytest.mark.parametrize(
    ("spoil", "fragment"),
    [
        (_garbage_attention, "attention.npz is not a readable .npz archive"),
        (_no_metrics, "metrics.jsonl is missing"),
        (_metrics_without_loss, "no training loss"),
    ],
)
def test_explore_command_answers_bad_input_with_one_line_and_writes_nothing(runner, run_dir, spoil, fragment):
    spoil(run_dir)
    result = runner.invoke(main, ["explore", str(run_dir)])
    assert_one_line_error(result, fragment)
    assert not (run_dir / "explore.html").exists()


def test_explore_command_names_a_missing_run_directory(runner, tmp_path):
    result = runner.invoke(main, ["explore", str(tmp_path / "nowhere")])
    assert_one_line_error(result, f"run directory {tmp_path / 'nowhere'} does not exist")


def assert_one_line_error(result, fragment: str) -> None:
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("gpt-viz: error: ") and fragment in line
    assert "Traceback" not in result.stderr
