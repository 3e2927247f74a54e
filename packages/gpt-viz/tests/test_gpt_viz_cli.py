"""The gpt-viz command: writes pictures and prints their paths; bad input is one line and exit 2."""

import os
import signal
import threading
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpt_viz.cli
from gpt_viz import RunLayout, save_attention_examples
from gpt_viz.cli import main


@pytest.fixture
def runner():
    """A runner that keeps stderr apart from stdout (click 8.1 needs asking; 8.2+ always does)."""
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


def written(result):
    return [Path(line) for line in result.stdout.splitlines()]


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpt-viz: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_curves_writes_curves_png_into_each_run(runner, make_run):
    runs = [make_run("a"), make_run("b", attention=False)]
    result = runner.invoke(main, ["curves", *map(str, runs)])
    assert result.exit_code == 0, result.output
    assert written(result) == [runs[0] / "curves.png", runs[1] / "curves.png"]
    assert all(path.stat().st_size > 0 for path in written(result))


def test_a_warning_while_drawing_is_one_line_naming_gpt_viz_not_a_source_listing(runner, make_run, monkeypatch):
    drawn = gpt_viz.cli.training_curves

    def warns(*args, **kwargs):
        warnings.warn(
            "Glyph 128578 (\\N{SLIGHTLY SMILING FACE})\nmissing from font(s) DejaVu Sans.", UserWarning, stacklevel=2
        )
        return drawn(*args, **kwargs)

    monkeypatch.setattr(gpt_viz.cli, "training_curves", warns)
    result = runner.invoke(main, ["curves", str(make_run("a"))])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert line == "gpt-viz: warning: Glyph 128578 (\\N{SLIGHTLY SMILING FACE}) missing from font(s) DejaVu Sans."


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_while_a_picture_is_written_is_one_line_and_leaves_the_old_picture(
    runner, make_run, monkeypatch, signum
):
    run = make_run("a")
    assert runner.invoke(main, ["curves", str(run)]).exit_code == 0
    before = (run / "curves.png").read_bytes()

    def stopped(*args, **kwargs):  # the signal arrives as the new picture is being written
        signal.raise_signal(signum)

    def killed(signum, frame):  # SIGTERM's default, without taking the test's process with it
        raise SystemExit("killed by SIGTERM")

    monkeypatch.setattr(os, "fsync", stopped)
    previous = signal.signal(signal.SIGTERM, killed)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker ignores SIGINT
    try:
        result = runner.invoke(main, ["curves", str(run)])
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, interrupt)
    assert (result.exit_code, result.stderr) == (130, "gpt-viz: aborted\n")
    assert (run / "curves.png").read_bytes() == before and not list(run.glob(".*.tmp-*"))


def test_gpt_viz_runs_outside_the_main_thread_too(runner, make_run):
    """A notebook's or a server's worker thread cannot set a signal handler: gpt-viz leaves signals alone there."""
    run, results = make_run("a"), []
    thread = threading.Thread(target=lambda: results.append(runner.invoke(main, ["curves", str(run)])))
    thread.start()
    thread.join()
    assert results[0].exit_code == 0, results[0].output


def test_curves_out_names_each_picture_after_its_run_and_svg_adds_svgs(runner, make_run, tmp_path):
    runs = [make_run("a"), make_run("b")]
    out = tmp_path / "pictures"
    result = runner.invoke(main, ["curves", *map(str, runs), "--out", str(out), "--svg"])
    assert result.exit_code == 0, result.output
    assert written(result) == [out / "a-curves.png", out / "a-curves.svg", out / "b-curves.png", out / "b-curves.svg"]
    assert all(path.is_file() for path in written(result))


def test_curves_out_refuses_runs_whose_pictures_would_collide(runner, make_run, tmp_path):
    first = make_run("x/seed0")
    second = make_run("y/seed0")
    result = runner.invoke(main, ["curves", str(first), str(second), "--out", str(tmp_path)])
    assert_one_line_error(result, "share the name 'seed0'")


def test_curves_metric_option_is_used(runner, make_run):
    result = runner.invoke(main, ["curves", str(make_run()), "--metric", "no_such_metric"])
    assert_one_line_error(result, "metric 'no_such_metric' not found", "it has: heldout_accuracy")


def test_compare_writes_one_picture_with_the_given_labels(runner, make_run, tmp_path):
    runs = [make_run("base", attention=False), make_run("no-ln", attention=False)]
    out = tmp_path / "ablation.png"
    args = ["compare", *map(str, runs), "--metric", "heldout_loss", "--label", "baseline", "--label", "no LN"]
    result = runner.invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert written(result) == [out]
    assert out.is_file()


def test_compare_defaults_to_a_file_named_after_the_metric(runner, make_run, tmp_path, monkeypatch):
    run = make_run(attention=False)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["compare", str(run), "--metric", "loss"])
    assert result.exit_code == 0, result.output
    assert written(result) == [Path("compare-loss.png")]
    assert (tmp_path / "compare-loss.png").is_file()


def test_compare_with_wrong_label_count_is_a_one_line_error(runner, make_run):
    runs = [make_run("a", attention=False), make_run("b", attention=False)]
    result = runner.invoke(main, ["compare", *map(str, runs), "--metric", "loss", "--label", "only-one"])
    assert_one_line_error(result, "got 1 label for 2 runs")


def test_compare_on_a_log_axis_refuses_a_metric_at_zero(runner, make_run, tmp_path, monkeypatch):
    """A log axis drops the points at or below 0: all of an untrained run's exact match was an empty picture."""
    monkeypatch.chdir(tmp_path)  # the linear-axis run below writes compare-heldout_exact_match.png here
    records = [{"step": step, "loss": 1.0, "heldout_exact_match": 0.0} for step in (10, 20)]
    run = make_run(records=records, attention=False)
    result = runner.invoke(main, ["compare", str(run), "--metric", "heldout_exact_match", "--log-y"])
    assert_one_line_error(result, "heldout_exact_match has values at or below 0, which a log axis cannot show")
    assert runner.invoke(main, ["compare", str(run), "--metric", "heldout_exact_match"]).exit_code == 0


def test_compare_requires_a_metric(runner, make_run):
    result = runner.invoke(main, ["compare", str(make_run())])
    assert result.exit_code == 2
    assert "--metric" in result.stderr


def test_attention_draws_the_last_layer_by_default(runner, make_run):
    run = make_run(n_layer=3)
    result = runner.invoke(main, ["attention", str(run)])
    assert result.exit_code == 0, result.output
    assert written(result) == [run / "attention-layer2.png"]


def test_attention_layer_and_out_options(runner, make_run, tmp_path):
    out = tmp_path / "heads.png"
    result = runner.invoke(main, ["attention", str(make_run()), "--layer", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert written(result) == [out]


@pytest.mark.parametrize(
    ("name", "svg", "expected"),
    [
        ("a.jpg", False, ["a.jpg"]),
        ("a.svg", True, ["a.svg"]),
        ("a.pdf", True, ["a.pdf", "a.svg"]),
        ("a", True, ["a.png", "a.svg"]),
    ],
)
def test_out_with_an_image_suffix_writes_that_format(runner, make_run, tmp_path, name, svg, expected):
    """--out a.jpg wrote a.png."""
    command = ["attention", str(make_run()), "--out", str(tmp_path / name), *(["--svg"] if svg else [])]
    result = runner.invoke(main, command)
    assert result.exit_code == 0, result.output
    assert written(result) == [tmp_path / path for path in expected]
    assert all(path.stat().st_size > 0 for path in written(result))
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_file()) == sorted(expected)


@pytest.mark.parametrize("out", [".", "folder", "new/"])
def test_out_naming_a_directory_is_a_one_line_error(runner, make_run, tmp_path, monkeypatch, out):
    """--out new/ (a directory not yet made) wrote new.png."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    run = str(make_run())
    for command in ("attention", "explore"):
        result = runner.invoke(main, [command, run, "--out", out])
        assert_one_line_error(result, "it is a directory; name a file")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name != "runs") == ["folder"]


def test_out_under_a_file_names_the_file_in_the_way(runner, make_run, tmp_path):
    (tmp_path / "afile").write_text("kept")
    run = str(make_run())
    for command in ("attention", "explore"):
        result = runner.invoke(main, [command, run, "--out", str(tmp_path / "afile" / "sub")])
        assert_one_line_error(result, f"{tmp_path / 'afile'} is a file, not a directory")
    assert (tmp_path / "afile").read_text() == "kept"


def test_curves_out_naming_a_file_says_it_takes_a_directory(runner, make_run, tmp_path):
    picture = tmp_path / "existing.png"
    picture.write_bytes(b"a picture")
    result = runner.invoke(main, ["curves", str(make_run()), "--out", str(picture)])
    assert_one_line_error(result, "is a file; curves writes its pictures into a directory")
    assert picture.read_bytes() == b"a picture"


def test_explore_out_adds_html_so_that_no_run_file_is_written_over(runner, make_run):
    run = make_run()
    metrics = RunLayout(run).metrics
    kept = metrics.read_bytes()
    result = runner.invoke(main, ["explore", str(run), "--out", str(metrics)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{metrics}.html\n"
    assert metrics.read_bytes() == kept


def test_attention_marks_the_prompt_the_file_records(runner, make_run, attention_examples, monkeypatch):
    run = make_run(attention=False)
    save_attention_examples(run, [attention_examples[0]._replace(prompt_length=4)])
    drawn = {}
    monkeypatch.setattr(gpt_viz.cli, "_save_and_report", lambda figure, out, svg: drawn.setdefault("figure", figure))
    assert runner.invoke(main, ["attention", str(run)]).exit_code == 0
    heatmaps = [ax for ax in drawn["figure"].axes if ax.get_images()]
    assert all(sorted(line.get_xdata()[0] for line in ax.get_lines()) == [0.0, 3.5] for ax in heatmaps)


def test_attention_layer_out_of_range_is_a_one_line_error(runner, make_run):
    result = runner.invoke(main, ["attention", str(make_run()), "--layer", "7"])
    assert_one_line_error(result, "layer 7 is out of range", "layers 0 to 1")


def test_attention_without_attention_file_is_a_one_line_error(runner, make_run):
    result = runner.invoke(main, ["attention", str(make_run(attention=False))])
    assert_one_line_error(result, "attention.npz is missing")


def test_grokking_writes_grokking_png(runner, make_run):
    run = make_run()
    result = runner.invoke(main, ["grokking", str(run)])
    assert result.exit_code == 0, result.output
    assert written(result) == [run / "grokking.png"]


@pytest.mark.parametrize("command", ["curves", "attention", "grokking"])
def test_missing_run_directory_is_a_one_line_error(runner, tmp_path, command):
    result = runner.invoke(main, [command, str(tmp_path / "missing")])
    assert_one_line_error(result, "missing does not exist")


def test_invalid_metrics_line_is_a_one_line_error(runner, make_run):
    run = make_run()
    RunLayout(run).metrics.write_text('{"step": 0, "loss": 1.0}\n{oops\n')
    result = runner.invoke(main, ["curves", str(run)])
    assert_one_line_error(result, "metrics.jsonl line 2 is not valid JSON")


def test_empty_metrics_file_is_a_one_line_error(runner, make_run):
    run = make_run()
    RunLayout(run).metrics.write_text("")
    result = runner.invoke(main, ["grokking", str(run)])
    assert_one_line_error(result, "metrics.jsonl is empty")


@pytest.mark.parametrize(
    ("command", "example"),
    [("curves", "addition sort"), ("compare", "runs/base"), ("attention", "addition"), ("grokking", "modadd")],
)
def test_every_command_help_shows_an_example(runner, command, example):
    """A task name, where the example is of one run: `run` names its folders runs/TASK-TIME."""
    result = runner.invoke(main, [command, "-h"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout
    assert f"gpt-viz {command} {example} " in result.stdout


def test_metrics_that_are_not_utf8_are_a_one_line_error(runner, make_run):
    run = make_run()
    RunLayout(run).metrics.write_bytes(b'{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 0.5, "x": "\xff"}\n')
    result = runner.invoke(main, ["curves", str(run)])
    assert_one_line_error(result, "metrics.jsonl is not UTF-8 text")


def test_garbage_attention_file_is_a_one_line_error_that_says_what_it_is(runner, make_run):
    run = make_run()
    RunLayout(run).attention.write_bytes(b"\x00\x01garbage" * 50)
    result = runner.invoke(main, ["attention", str(run)])
    assert_one_line_error(result, "attention.npz is not a readable .npz archive")
    assert "pickle" not in result.stderr


def test_grokking_plots_the_metric_it_is_given(runner, make_run):
    records = [
        {"step": step, "loss": 1.0, "train_exact_match": value, "heldout_exact_match": value / 2}
        for step, value in [(10, 0.5), (100, 1.0)]
    ]
    run = make_run(records=records)
    result = runner.invoke(main, ["grokking", str(run), "--metric", "exact_match"])
    assert result.exit_code == 0, result.output
    assert written(result) == [run / "grokking.png"]
    result = runner.invoke(main, ["grokking", str(run)])
    assert_one_line_error(result, "metric 'train_accuracy' not found")


def test_grokking_draws_the_loss_and_progress_panels_it_is_asked_for(runner, make_run):
    records = [
        {"step": step, "loss": 1.0, "train_accuracy": acc, "heldout_accuracy": acc / 2, "train_loss": 1 - acc / 2,
         "heldout_loss": 2 - acc, "heldout_probe_fourier_top5_share": acc / 3}
        for step, acc in [(10, 0.5), (100, 1.0)]
    ]  # fmt: skip
    run = make_run(records=records)
    result = runner.invoke(
        main, ["grokking", str(run), "--loss", "loss", "--progress", "heldout_probe_fourier_top5_share"]
    )
    assert result.exit_code == 0, result.output
    assert written(result) == [run / "grokking.png"]
    result = runner.invoke(main, ["grokking", str(run), "--progress", "heldout_fourier_top5_share"])
    assert_one_line_error(result, "metric 'heldout_fourier_top5_share' not found")


def test_grokking_of_a_metric_that_is_no_fraction_is_a_one_line_error(runner, make_run):
    """--metric loss claimed "train loss (>= 0.99 at step 20)" on an axis fixed at 0 to 1 that showed no loss."""
    records = [{"step": s, "loss": 4.0, "train_loss": 4.0 - s / 100, "heldout_loss": 5.0} for s in (10, 20)]
    result = runner.invoke(main, ["grokking", str(make_run(records=records)), "--metric", "loss"])
    assert_one_line_error(result, "train_loss runs from 3.8 to 3.9", "--loss loss")


def test_a_format_matplotlib_cannot_write_here_is_a_one_line_error(runner, make_run, tmp_path):
    """.pgf needs LaTeX: an 80-line traceback ending in "'xelatex' not found"."""
    pytest.importorskip("matplotlib.backends.backend_pgf")
    result = runner.invoke(main, ["attention", str(make_run()), "--out", str(tmp_path / "a.pgf")], env={"PATH": ""})
    assert_one_line_error(result, "cannot draw", "as pgf")


def test_a_dollar_in_a_label_or_run_name_is_drawn_as_typed(runner, make_run, tmp_path):
    """matplotlib read "$" as mathtext: a ParseSyntaxException traceback."""
    run = make_run("sort_$x^$")
    result = runner.invoke(
        main, ["compare", str(run), "--metric", "loss", "--label", "$\\frac$", "--out", str(tmp_path / "c")]
    )
    assert result.exit_code == 0, result.output
    assert runner.invoke(main, ["curves", str(run)]).exit_code == 0


def test_curves_out_naming_a_picture_says_it_takes_a_directory(runner, make_run, tmp_path):
    """--out pic.png made a directory named pic.png."""
    result = runner.invoke(main, ["curves", str(make_run()), "--out", str(tmp_path / "pic.png")])
    assert_one_line_error(result, "names a picture; curves writes RUN-curves.png for each run into a directory")
    assert not (tmp_path / "pic.png").exists()


def test_each_picture_is_named_as_it_is_written_before_a_later_one_fails(runner, make_run, tmp_path):
    (tmp_path / "p.svg").mkdir()  # the SVG cannot be written
    result = runner.invoke(main, ["attention", str(make_run()), "--out", str(tmp_path / "p.png"), "--svg"])
    assert result.exit_code == 2 and written(result) == [tmp_path / "p.png"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.25])
@pytest.mark.parametrize("command", ["attention", "curves", "explore"])
def test_every_command_reading_attention_refuses_weights_that_are_not_probabilities_alike(
    runner, make_run, attention_examples, command, value
):
    """`attention` and `curves` drew NaN weights as a saturated picture and exited 0, where `explore` refused them."""
    run = make_run(attention=False)
    spoiled = attention_examples[0].weights.copy()
    spoiled[0, 1, 3, 0] = value
    save_attention_examples(run, [attention_examples[0]._replace(weights=spoiled)])
    result = runner.invoke(main, [command, str(run)])
    wrong = "negative values" if value < 0 else "NaN or infinite values"
    assert_one_line_error(result, f"{RunLayout(run).attention}: weights hold {wrong}")
    assert [path.name for path in run.iterdir() if path.suffix in (".png", ".html")] == []


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (["attention", "RUN", "--layer", "x"], "Invalid value for '--layer': 'x' is not a valid integer"),
        (["compare", "RUN"], "Missing option '--metric'"),
        (["attention"], "Missing argument 'RUN_DIR'"),
        (["curves", "RUN", "--bogus"], "No such option: --bogus"),
        (["--bogus"], "No such option: --bogus"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_a_usage_error_is_one_line_too(runner, make_run, arguments, fragment):
    """Usage errors printed click's usage block, four lines, where the README promises one."""
    run = str(make_run(attention=False))
    result = runner.invoke(main, [run if argument == "RUN" else argument for argument in arguments])
    assert_one_line_error(result)
    assert fragment.replace("No such option: ", "") in result.stderr and "Usage:" not in result.stderr


@pytest.mark.parametrize("arguments", [["--help"], ["compare", "--help"]])
def test_help_asked_for_is_still_the_help(runner, arguments):
    result = runner.invoke(main, arguments)
    assert result.exit_code == 0 and result.stdout.startswith("Usage: ") and "Options:" in result.stdout


def test_an_empty_out_says_it_is_empty_and_writes_nothing(runner, make_run, tmp_path, monkeypatch):
    """--out "" said "cannot write a picture to : it is a directory"; curves wrote into the current directory."""
    monkeypatch.chdir(tmp_path)
    run = str(make_run())
    for command, fragment in [
        (["attention", run], "cannot write a picture: the path is empty; name a file"),
        (["compare", run, "--metric", "loss"], "cannot write a picture: the path is empty; name a file"),
        (["explore", run], "cannot write the page: the path is empty; name a file"),
        (["curves", run], "--out is empty; name a directory for the pictures"),
    ]:
        assert_one_line_error(runner.invoke(main, [*command, "--out", ""]), fragment)
    assert [path.name for path in tmp_path.iterdir()] == ["runs"]


@pytest.mark.parametrize("name", [RunLayout.CONFIG, RunLayout.METRICS, RunLayout.ATTENTION])
@pytest.mark.parametrize("command", ["curves", "explore"])
def test_a_run_file_that_is_a_directory_is_named_as_one_not_taken_as_missing(runner, make_run, name, command):
    """A config.json directory was read as no config (the title lost its task); a metrics.jsonl one was "missing"."""
    run = make_run()
    path = run / name
    path.unlink()
    path.mkdir()
    assert_one_line_error(runner.invoke(main, [command, str(run)]), f"{path} is a directory, not a file")
