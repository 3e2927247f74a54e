"""gpt-train inspect RUN report: report.html states the findings first, then each picture with its table and
what it means; in Chromium it is one self-contained page (nothing fetched) that fits a phone's width."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_runs import gpt_train, trained_sort

from gpt_train.cli import main
from gpt_viz import RunLayout

PHONE = {"width": 390, "height": 844}
MARKED_NAME = "sort__SECTIONS____FINDINGS__"
"""The reported run's name: it holds the page template's own markers, which must come out as the name's text."""


def invoke(capsys, *args) -> tuple[int, str]:
    try:
        main(list(map(str, args)))
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, str]:
    run_dir = trained_sort(tmp_path_factory.mktemp("report") / MARKED_NAME)
    gpt_train("inspect", run_dir, "report", "--examples", 200, "--pairs", 100)
    return run_dir, RunLayout(run_dir).report.read_text(encoding="utf-8")


def test_the_report_runs_every_analysis_and_writes_each_record_and_picture(reported):
    run_dir, _ = reported
    layout = RunLayout(run_dir)
    for path in (
        layout.heads_ablation,
        layout.logit_lens,
        layout.reads,
        *(layout.patching(p) for p in ("resid_pre", "attn_out", "mlp_out")),
    ):
        assert json.loads(path.read_text())["step"] == 300
    assert layout.reads_picture.stat().st_size > 10_000 and layout.heads_picture.is_file()


def test_a_run_name_holding_the_templates_markers_is_its_title_and_nothing_more(reported):
    _, page = reported
    title = page[page.index("<title>") + len("<title>") : page.index("</title>")]
    assert title == f"sort — {MARKED_NAME} · gpt-train report"
    heading = page[page.index("<h1>") + len("<h1>") : page.index("</h1>")]
    assert heading == f"sort — {MARKED_NAME}"
    assert page.count("<section") == 7  # the findings, then one per analysis


def test_the_report_states_the_findings_first_then_a_section_per_analysis(reported):
    _, page = reported
    findings, first_section = page.index('id="findings"'), page.index('<section id="heads">')
    assert findings < first_section
    assert "layer 0&#x27;s attention is" in page[findings:first_section]
    assert "the answer appears after" in page[findings:first_section]
    assert '<p class="rules">Rules: a layer is unused when' in page[findings:first_section]
    assert "__" not in page.replace(MARKED_NAME, "")  # every template marker filled
    for anchor in ("heads", "logit-lens", "patch-resid_pre", "patch-attn_out", "patch-mlp_out", "reads"):
        section = page[page.index(f'<section id="{anchor}">') :]
        section = section[: section.index("</section>")]
        assert section.count('<img src="data:image/png;base64,') == 1 and "<table>" in section and "<p>" in section
    assert "http://" not in page and "https://" not in page  # nothing to fetch


def test_the_report_in_chromium_draws_every_picture_fetches_nothing_and_fits_a_phone(reported):
    from browser_helpers import launched_browser

    run_dir, _ = reported
    requests, errors = [], []
    for browser in launched_browser():
        page = browser.new_page(viewport=PHONE, device_scale_factor=1)
        page.on("request", lambda request: requests.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(RunLayout(run_dir).report.as_uri())
        page.wait_for_load_state("load")
        images = page.locator("img").evaluate_all("imgs => imgs.map(i => [i.complete, i.naturalWidth, i.clientWidth])")
        assert len(images) == 6 and all(
            done and natural > 300 and 0 < shown <= PHONE["width"] for done, natural, shown in images
        )
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scrolling
        assert page.locator("#findings li").count() >= 6
        assert [url for url in requests if not url.startswith(("file:", "data:"))] == []
        assert errors == []
        page.close()


def test_attention_png_shows_the_first_layer_until_ablation_names_the_layer_that_matters(tmp_path, monkeypatch):
    import gpt_train.pictures as pictures

    drawn = []
    real = pictures.gpt_viz.attention_grid
    monkeypatch.setattr(
        pictures.gpt_viz,
        "attention_grid",
        lambda weights, tokens, layer, prompt_length: (
            drawn.append((layer, prompt_length)) or real(weights, tokens, layer=layer, prompt_length=prompt_length)
        ),
    )
    run_dir = trained_sort(tmp_path / "sort")
    gpt_train("inspect", run_dir, "heads", "--examples", 200)
    record = json.loads(RunLayout(run_dir).heads_ablation.read_text())
    from gpt_viz.inspect_pictures import most_needed_head

    prompt = 4  # the example's 4 prompt digits: the line between prompt and answer is drawn both times
    assert drawn == [(0, prompt), (most_needed_head(record)[0], prompt)]


def test_a_task_without_prompt_answer_shape_is_refused_before_anything_runs(tmp_path, capsys):
    run_dir = tmp_path / "modadd"
    code, _ = invoke(
        capsys, "run", "--task", "modadd", "--set", "p=11", "--steps", 2, "--device", "cpu", "--quiet", "--out", run_dir
    )
    assert code == 0
    before = sorted(path.name for path in run_dir.iterdir())
    try:
        main(["inspect", str(run_dir), "report", "--device", "cpu"])
    except SystemExit as exit_:
        assert exit_.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpt-train: error: report needs a prompt-answer task") and len(err.strip().splitlines()) == 1
    assert sorted(path.name for path in run_dir.iterdir()) == before


def test_an_analysis_that_refuses_the_run_is_left_out_and_the_page_says_why(tmp_path, capsys, monkeypatch):
    """Patching refuses a model whose answer hardly depends on the corrupted token (or a task without corruptions):
    the report was not written at all."""
    import gpt_train.lab

    def refuses(*args, **kwargs):
        raise gpt_train.lab.InspectError("the clean and corrupted answers differ by 0.001 in logit difference")

    monkeypatch.setattr(gpt_train.lab, "patch", refuses)
    run_dir = trained_sort(tmp_path / "sort")
    code, _ = invoke(capsys, "inspect", run_dir, "report", "--examples", 200, "--device", "cpu")
    assert code == 0
    page = RunLayout(run_dir).report.read_text(encoding="utf-8")
    assert 'id="heads"' in page and 'id="reads"' in page and 'id="patch-' not in page
    said = "the clean and corrupted answers differ by 0.001 in logit difference"
    assert f"Left out, patch resid_pre, patch attn_out, patch mlp_out: {said}." in page
