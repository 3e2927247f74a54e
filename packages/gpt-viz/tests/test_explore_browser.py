"""The explorer page in a real browser: headless Chromium (the system's, driven by playwright) opens the file
and what it draws is checked from screenshots.

Skipped, saying why, only where playwright (the gpt-viz[test] extra) or a Chromium executable is missing; CI has
both (the gpt-viz nox session installs gpt-viz[test], .ci/run installs Debian's `chromium`).
"""

from __future__ import annotations

import io
import json
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
