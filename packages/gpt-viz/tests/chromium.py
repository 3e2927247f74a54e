"""Headless Chromium for the page tests, gpt-viz's explorer and gpt-train's report and served explorer alike:
$GPT_VIZ_CHROMIUM, else Debian's chromium (or chromium-browser) on PATH, driven by playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install the package's [test] extra"
)


def launched_browser() -> Iterator:
    """A module fixture's body: the browser, closed at the end; a skip saying why where there is none."""
    executable = os.environ.get("GPT_VIZ_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no Chromium executable: apt-get install chromium, or set GPT_VIZ_CHROMIUM to one")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--disable-dev-shm-usage"])
        yield browser
        browser.close()
