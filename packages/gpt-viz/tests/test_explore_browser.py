"""The explorer page in a real browser: headless Chromium (the system's, driven by playwright) opens the file
and what it draws is checked from screenshots.

Skipped, saying why, only where playwright (the gpt-viz[test] extra) or a Chromium executable is missing; CI has
both (the gpt-viz nox session installs gpt-viz[test], .ci/run installs Debian's `chromium`).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from chromium import launched_browser, playwright_api
from fixture_records import HEADS_ABLATION
from matplotlib.image import imread
from picture_checks import count_colours

from gpt_viz import RunLayout, load_attention_examples, save_attention_examples
from gpt_viz.explore import write_explorer

Browser, Page = playwright_api.Browser, playwright_api.Page

VIEWPORT = {"width": 1200, "height": 900}
ABLATION = HEADS_ABLATION | {"examples": 64, "baseline": 0.9, "zero": [[0.9, 0.2, 0.9, 0.8], [0.1, 0.9, 0.5, 0.9]]}
ABLATION["mean"] = [[0.9, 0.6, 0.9, 0.9], [0.4, 0.9, 0.7, 0.9]]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launched_browser()


@pytest.fixture
def page(browser: Browser, run_dir: Path) -> Iterator[Page]:
    """The fixture run's explorer page (2 layers x 4 heads, head-ablation table included), loaded, script finished."""
    RunLayout(run_dir).heads_ablation.write_text(json.dumps(ABLATION))
    errors: list[str] = []
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on(
        "request", lambda request: errors.append(f"request {request.url}") if request.url.startswith("http") else None
    )
    page.goto(write_explorer(run_dir).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    yield page
    page.close()
    assert errors == []


def pixels(png: bytes) -> np.ndarray:
    """A screenshot as an (H, W, 3) array of floats in [0, 1]."""
    return imread(io.BytesIO(png), format="png")[..., :3]


def heatmap_geometry(page: Page) -> dict[str, float]:
    """Where the big heatmap's cells are on its canvas, in CSS pixels, as the page's script records it."""
    return page.locator("#attention").evaluate(
        "c => ({left: +c.dataset.left, top: +c.dataset.top, cell: +c.dataset.cell})"
    )


def cell_luminance(page: Page) -> np.ndarray:
    """The (T, T) luminance at the centre of each cell of the big attention heatmap, read off a screenshot."""
    canvas = page.locator("#attention")
    geometry = heatmap_geometry(page)
    image = pixels(canvas.screenshot())
    length = int(canvas.evaluate("c => +c.dataset.tokens"))
    centres = [int(geometry["left"] + (i + 0.5) * geometry["cell"]) for i in range(length)]
    rows = [int(geometry["top"] + (i + 0.5) * geometry["cell"]) for i in range(length)]
    rgb = image[np.ix_(rows, centres)]  # (T, T, 3)
    return rgb @ np.array([0.2126, 0.7152, 0.0722])


def lower_triangle_correlation(luminance: np.ndarray, weights: np.ndarray) -> float:
    """How well the drawn brightness follows ``weights`` where a causal head may attend (viridis brightens with t)."""
    below = np.tril_indices(len(weights))
    return float(np.corrcoef(luminance[below], weights[below])[0, 1])


def attention_weights(run_dir: Path, example: int = 0) -> np.ndarray:
    """One example's weights (n_layer, n_head, T, T) as the run's attention file holds them."""
    return load_attention_examples(run_dir)[example].weights


def test_the_page_renders_a_real_picture(page):
    image = pixels(page.screenshot(full_page=True))
    assert image.shape[1] == VIEWPORT["width"] and image.shape[0] >= VIEWPORT["height"]
    assert count_colours(image) > 200
    assert image.std() > 0.1
    assert page.inner_text("#error") == ""
    assert page.input_value("#metric") == "heldout_exact_match"  # the config's primary metric on the right axis
    assert page.locator("#overview figure").count() == 2 * 4
    assert page.locator("#tokens span").count() == 10
    assert page.locator("#example option").all_inner_texts() == ["1: 12+34=46\u2423$", "2: 9+8=17$", "3: 50+50=100$"]


def test_invisible_characters_in_a_token_show_as_their_escapes_not_as_a_blank(page):
    shown = page.evaluate(r"shown('a\u2028\u2029\u202e\u200f\x01 \n\t')")
    assert shown == "a\\u2028\\u2029\\u202e\\u200f\\u0001\u2423\u21b5\u21e5"


def test_the_page_opens_on_the_head_the_ablation_table_finds_most_needed(page, run_dir):
    # ABLATION: head 1.0 zero-ablated leaves 0.1, the lowest
    assert (page.input_value("#layer"), page.input_value("#head")) == ("1", "0")
    assert page.locator("#attention").evaluate("c => [c.dataset.layer, c.dataset.head]") == ["1", "0"]


def test_without_a_head_ablation_table_the_page_opens_on_the_first_layer(browser, run_dir):
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    page.goto(write_explorer(run_dir).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    assert (page.input_value("#layer"), page.input_value("#head")) == ("0", "0")
    assert lower_triangle_correlation(cell_luminance(page), attention_weights(run_dir)[0, 0]) > 0.98
    page.close()


def test_choosing_another_head_draws_that_heads_pattern(page, run_dir):
    weights = attention_weights(run_dir)
    last_layer = weights.shape[0] - 1
    before = page.locator("#attention").screenshot()
    assert lower_triangle_correlation(cell_luminance(page), weights[last_layer, 0]) > 0.98

    page.select_option("#head", "2")
    after = page.locator("#attention").screenshot()
    luminance = cell_luminance(page)
    assert not np.array_equal(pixels(before), pixels(after))
    assert lower_triangle_correlation(luminance, weights[last_layer, 2]) > 0.98
    assert lower_triangle_correlation(luminance, weights[last_layer, 0]) < 0.9
    assert page.locator("#overview figure.selected figcaption").inner_text() == f"L{last_layer} H2"


def test_choosing_another_example_draws_that_examples_pattern(page, run_dir):
    last_layer = attention_weights(run_dir).shape[0] - 1
    first, second, third = (attention_weights(run_dir, example)[last_layer, 0] for example in range(3))
    before = pixels(page.locator("#attention").screenshot())
    assert lower_triangle_correlation(cell_luminance(page), first) > 0.98

    page.select_option("#example", "2")  # the same length as the first, its own pattern
    luminance = cell_luminance(page)
    assert not np.array_equal(before, pixels(page.locator("#attention").screenshot()))
    assert lower_triangle_correlation(luminance, third) > 0.98
    assert lower_triangle_correlation(luminance, first) < 0.9
    assert page.locator("#tokens").inner_text().split() == ["5", "0", "+", "5", "0", "=", "1", "0", "0", "$"]

    page.select_option("#example", "1")  # shorter: 7 positions, none of the file's padding
    assert page.locator("#attention").evaluate("c => [c.dataset.example, +c.dataset.tokens]") == ["1", 7]
    assert lower_triangle_correlation(cell_luminance(page), second) > 0.98
    assert page.locator("#tokens span").count() == 7
    assert page.locator("#overview figure.selected figcaption").inner_text() == f"L{last_layer} H0"


def test_hovering_a_cell_shows_that_heads_weight_for_that_query_and_key(page, run_dir):
    weights = attention_weights(run_dir)
    page.select_option("#layer", "0")
    page.select_option("#head", "3")
    geometry = heatmap_geometry(page)
    query, key = 7, 2
    page.locator("#attention").hover(
        position={
            "x": geometry["left"] + (key + 0.5) * geometry["cell"],
            "y": geometry["top"] + (query + 0.5) * geometry["cell"],
        }
    )
    readout = page.inner_text("#attention-readout")
    assert readout.startswith("layer 0 head 3: query 7 ")
    shown = re.search(r"key 2 \u201c\+\u201d: weight (\d\.\d{3})$", readout)
    assert shown is not None, readout
    # The page holds a weight as a byte of its row's largest (within half a level), and shows three decimals.
    row = weights[0, 3, query]
    assert abs(float(shown[1]) - row[key]) <= row.max() / 510 + 0.0005


def test_hovering_a_token_highlights_its_row_and_column(page):
    before = pixels(page.locator("#attention").screenshot())
    page.hover("#tokens span:nth-child(5)")  # position 4
    chip_classes = page.locator("#tokens span:nth-child(5)").get_attribute("class").split()
    assert sorted(chip_classes) == ["col", "row"]
    assert page.locator("#tokens span.row").count() == 1
    after = pixels(page.locator("#attention").screenshot())
    geometry = heatmap_geometry(page)
    left, top, cell = (int(geometry[name]) for name in ("left", "top", "cell"))
    changed = np.any(before != after, axis=-1)  # (H, W)
    size = 10 * cell
    row_edges = changed[[top + 4 * cell, top + 5 * cell], left : left + size]  # row 4's outline, top and bottom
    column_edges = changed[top : top + size, [left + 4 * cell, left + 5 * cell]]  # column 4's, left and right
    assert row_edges.all(axis=0).mean() > 0.9 and column_edges.all(axis=1).mean() > 0.9
    outside = changed[top + 7 * cell + 3 : top + 8 * cell - 3, left + 7 * cell + 3 : left + 8 * cell - 3]
    assert not outside.any()
    assert page.inner_text("#attention-readout").startswith("layer 1 head 0: token 4 \u201c4\u201d reads most from")


def test_clicking_a_head_ablation_cell_shows_that_heads_attention(page):
    canvas = page.locator("#ablation-zero")
    grid = canvas.evaluate(
        "c => ({left: +c.dataset.left, top: +c.dataset.top, w: +c.dataset.cellW, h: +c.dataset.cellH})"
    )
    canvas.click(position={"x": grid["left"] + 2.5 * grid["w"], "y": grid["top"] + 0.5 * grid["h"]})  # layer 0, head 2
    assert (page.input_value("#layer"), page.input_value("#head")) == ("0", "2")
    assert page.locator("#attention").evaluate("c => [c.dataset.layer, c.dataset.head]") == ["0", "2"]
    assert page.inner_text("#ablation-readout") == "layer 0 head 2 zero-ablated: exact_match 0.9 (+0 from 0.9)"


def red(image: np.ndarray) -> np.ndarray:
    """Where an (H, W, 3) picture is the prompt/answer line's red: no viridis colour is red without green."""
    return (image[..., 0] > 0.6) & (image[..., 1] < 0.3) & (image[..., 2] < 0.3)


def thumbnails_red(page: Page) -> list[bool]:
    """Whether each overview thumbnail shows red inside the 2-pixel border that marks the selected head (cut 3 pixels
    deep: a thumbnail may sit between pixels)."""
    return [
        bool(red(pixels(canvas.screenshot())[3:-3, 3:-3]).any()) for canvas in page.locator("#overview canvas").all()
    ]


def near(at: float) -> slice:
    """The pixels within 2 of ``at``: a 2-pixel line drawn there, wherever it falls between pixels."""
    return slice(int(at) - 2, int(at) + 3)


@pytest.fixture
def prompt_page(browser: Browser, run_dir: Path) -> Iterator[Page]:
    """The fixture run's page with examples 0 and 2 a prompt of 6 tokens then its answer, example 1 a text window."""
    first, text, third = load_attention_examples(run_dir)
    save_attention_examples(run_dir, [first._replace(prompt_length=6), text, third._replace(prompt_length=6)])
    errors: list[str] = []
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(write_explorer(run_dir).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    yield page
    page.close()
    assert errors == []


def test_a_red_line_on_every_heatmap_splits_the_prompt_from_the_answer(prompt_page):
    page = prompt_page
    assert page.locator("#attention").evaluate("c => c.dataset.answer") == "6"
    geometry = heatmap_geometry(page)
    left, top, cell = geometry["left"], geometry["top"], geometry["cell"]
    lines = red(pixels(page.locator("#attention").screenshot()))
    centres = [int(left + (i + 0.5) * cell) for i in range(10)]
    x, y = left + 6 * cell, top + 6 * cell  # before key 6 and before query 6, the first answer position
    assert lines[[int(top + (i + 0.5) * cell) for i in range(10)], near(x)].any(axis=1).all()  # down every row
    assert lines[near(y), centres].any(axis=0).all()  # across every column
    away = lines[int(top) : int(top + 10 * cell), int(left) : int(left + 10 * cell)].copy()
    away[:, near(x - left)] = away[near(y - top), :] = False
    assert not away.any()
    assert all(thumbnails_red(page))
    caption = page.inner_text("#attention-caption")
    assert "Each row is the position that reads" in caption and "bright cell" in caption
    assert "prompt ends and the answer begins" in caption


def test_a_text_window_has_no_line_and_its_caption_mentions_none(prompt_page):
    page = prompt_page
    page.select_option("#example", "1")
    assert page.locator("#attention").evaluate("c => c.dataset.answer") == ""
    assert not red(pixels(page.locator("#attention").screenshot())).any()
    assert not any(thumbnails_red(page))
    caption = page.inner_text("#attention-caption")
    assert "Each row is the position that reads" in caption and "prompt" not in caption
    page.select_option("#example", "2")
    assert page.locator("#attention").evaluate("c => c.dataset.answer") == "6" and all(thumbnails_red(page))


def test_a_prompt_length_the_page_cannot_trust_draws_no_line(browser, run_dir):
    first, text, third = load_attention_examples(run_dir)
    save_attention_examples(run_dir, [first._replace(prompt_length=6), text, third])
    path = write_explorer(run_dir)
    html = path.read_text(encoding="utf-8")
    assert html.count('"prompt_length":6,') == 1
    path.write_text(html.replace('"prompt_length":6,', '"prompt_length":"6\\u003cimg src=x onerror=alert(1)\\u003e",'))
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    assert page.locator("#attention").evaluate("c => c.dataset.answer") == ""
    assert not red(pixels(page.locator("#attention").screenshot())).any()
    assert page.locator("img").count() == 0 and page.inner_text("#error") == ""
    page.close()


def opened(browser: Browser, run: Path) -> Page:
    """A run's explorer page, written, loaded and its script finished without an error."""
    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    page.goto(write_explorer(run).as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    assert page.inner_text("#error") == ""
    return page


def ablation_cell_colour(page: Page, kind: str, layer: int, head: int) -> np.ndarray:
    """The RGB of a head-ablation cell near its top-left corner, away from the number written in its middle."""
    canvas = page.locator(f"#ablation-{kind}")
    grid = canvas.evaluate(
        "c => ({left: +c.dataset.left, top: +c.dataset.top, w: +c.dataset.cellW, h: +c.dataset.cellH})"
    )
    image = pixels(canvas.screenshot())
    return image[int(grid["top"] + layer * grid["h"] + 5), int(grid["left"] + head * grid["w"] + 5)]


@pytest.mark.parametrize(("metric", "higher_is_better"), [("bits_per_char", False), ("exact_match", True)])
def test_ablation_cells_are_red_where_a_head_removed_makes_the_metric_worse_as_the_table_says(
    browser, run_dir, metric, higher_is_better
):
    """A text run's bits_per_char table (lower is better, no "loss" in its name) was coloured backwards."""
    worse, better = (3.0, 1.0) if not higher_is_better else (1.0, 3.0)
    table = ABLATION | {"metric": metric, "higher_is_better": higher_is_better, "baseline": 2.0}
    table |= {"zero": [[worse, better, 2.0, 2.0], [2.0] * 4], "mean": [[2.0] * 4, [2.0] * 4]}
    RunLayout(run_dir).heads_ablation.write_text(json.dumps(table))
    page = opened(browser, run_dir)
    red_cell, blue_cell = ablation_cell_colour(page, "zero", 0, 0), ablation_cell_colour(page, "zero", 0, 1)
    assert red_cell[0] > 0.7 and red_cell[2] < 0.3, red_cell
    assert blue_cell[2] > 0.6 and blue_cell[0] < 0.3, blue_cell
    page.close()


LOSS_RGB, METRIC_RGB = np.array([31, 119, 180]) / 255, np.array([255, 127, 14]) / 255  # the page's series colours


def series_pixels(page: Page, rgb: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """Where the curves chart shows a series' colour inside its frame ((H, W) mask over the canvas), and where the
    frame is: its left and right x and its first and last step, as the page records them."""
    canvas = page.locator("#curves")
    frame = canvas.evaluate(
        "c => ({left: +c.dataset.left, right: +c.dataset.right, first: +c.dataset.first, last: +c.dataset.last})"
    )
    image = pixels(canvas.screenshot())
    mask = np.all(np.abs(image - rgb) < 0.25, axis=-1)  # an antialiased 1.6-pixel line is no pixel quite its colour
    inside = np.zeros_like(mask)
    inside[18:286, int(frame["left"]) + 2 : int(frame["right"]) - 1] = True  # the frame's box: top 16, bottom H - 42
    return mask & inside, frame


def step_x(frame: dict[str, float], step: float) -> float:
    return frame["left"] + (step - frame["first"]) / (frame["last"] - frame["first"]) * (frame["right"] - frame["left"])


def test_a_run_of_one_logged_step_shows_its_point_in_the_middle_of_the_chart(browser, make_run):
    run = make_run(records=[{"step": 10, "loss": 2.0}], attention=False)
    page = opened(browser, run)
    drawn, frame = series_pixels(page, LOSS_RGB)
    columns = np.flatnonzero(drawn.any(axis=0))
    assert columns.size, "the one training loss point is not drawn"
    middle = (frame["left"] + frame["right"]) / 2
    assert abs(columns.mean() - middle) < 3 and abs(step_x(frame, 10) - middle) < 1
    page.close()


def test_a_finite_value_between_gaps_is_drawn_as_a_dot(browser, make_run):
    losses = [2.0, math.nan, 1.0, math.nan, 0.5, 0.4]  # step 20's loss has no neighbour to draw a line to
    records = [{"step": 10 * i, "loss": loss} for i, loss in enumerate(losses)]
    page = opened(browser, make_run(records=records, attention=False))
    drawn, frame = series_pixels(page, LOSS_RGB)
    at = step_x(frame, 20)
    assert drawn[:, int(at) - 2 : int(at) + 3].any()
    assert not drawn[:, int(step_x(frame, 10)) + 3 : int(at) - 4].any()  # and no line to it
    page.close()


@pytest.mark.parametrize("schedule", ["warm-up then decay", "constant"])
def test_the_learning_rate_gets_an_axis_fitting_its_values_not_zero_to_one(browser, make_run, schedule):
    """With no evaluation logged the right axis shows lr, which was drawn on a 0–1 axis: flat along the bottom."""
    peak = 3e-3
    rates = [peak * min(1, step / 20) * (1 - step / 200) for step in range(0, 101)]
    rates = rates if schedule != "constant" else [peak] * 101
    records = [{"step": step, "loss": 3.0 / (1 + step), "lr": rate} for step, rate in enumerate(rates)]
    page = opened(browser, make_run(records=records, attention=False))
    assert page.input_value("#metric") == "lr"
    rows = np.flatnonzero(series_pixels(page, METRIC_RGB)[0].any(axis=1))
    assert rows.size
    top, bottom = 16, 330 - 42  # the frame, as the page draws it
    if schedule == "constant":
        assert abs(rows.mean() - (top + bottom) / 2) < 5  # a flat line in the middle
    else:
        assert rows.max() - rows.min() > 0.8 * (bottom - top)  # from 0 to its peak
    page.close()


def test_the_summary_counts_one_layer_head_and_logged_step_in_the_singular(browser, make_run):
    config = {"task": "sort", "model": {"n_layer": 1, "n_head": 1, "n_embd": 32, "pos": "learned"}}
    run = make_run(config=config, records=[{"step": 10, "loss": 2.0}], n_layer=1, n_head=1)
    RunLayout(run).heads_ablation.write_text(json.dumps(ABLATION | {"examples": 1, "zero": [[0.5]], "mean": [[0.6]]}))
    page = opened(browser, run)
    assert (
        page.inner_text("#summary")
        == "1 layer \u00b7 1 head \u00b7 32 dimensions \u00b7 positions: learned \u00b7 1 logged step, step 10"
    )
    assert page.inner_text("#ablation-note").startswith("exact_match on 1 heldout example with each head ablated")
    page.close()


def test_the_axis_labels_of_a_few_tokens_heatmap_stay_on_its_canvas(browser, make_run, attention_examples):
    """Three tokens drew a heatmap shorter than "← query position (reading)", which ran off the canvas."""
    run = make_run(attention=False)
    save_attention_examples(run, [attention_examples[0]._replace(weights=attention_examples[0].weights[..., :3, :3],
                                                                 tokens=["a", "b", "c"])])  # fmt: skip
    page = opened(browser, run)
    image = pixels(page.locator("#attention").screenshot())
    ink = image.mean(axis=-1) < 0.8
    widths = page.evaluate(
        "() => { const c = document.createElement('canvas').getContext('2d'); c.font = AXIS_FONT;"
        " return [QUERY_AXIS, KEY_AXIS].map((text) => c.measureText(text).width); }"
    )
    rows = np.flatnonzero(ink[:, 2:16].any(axis=1))  # the query axis's label, turned up the left edge at x = 9
    assert rows.max() - rows.min() >= widths[0] - 4 and rows.min() > 0 and rows.max() < ink.shape[0] - 1
    bottom = int(heatmap_geometry(page)["top"] + 3 * heatmap_geometry(page)["cell"])
    columns = np.flatnonzero(ink[bottom + 6 :, :].any(axis=0))  # the key axis's label, under the heatmap
    assert columns.max() - columns.min() >= widths[1] - 4 and columns.min() > 0 and columns.max() < ink.shape[1] - 1
    page.close()
