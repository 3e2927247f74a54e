"""Headless Chromium for gpt-train's page tests (report.html, the served explorer), found and launched as
gpt-viz's explorer test does: $GPT_VIZ_CHROMIUM, else Debian's chromium on PATH, driven by playwright."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed: pip install 'gpt-train[test]'"
)


def chromium_executable() -> str | None:
    return os.environ.get("GPT_VIZ_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def launched_browser() -> Iterator:
    """A module fixture's body: the browser, closed at the end; a skip saying why where there is none."""
    executable = chromium_executable()
    if executable is None:
        pytest.skip("no Chromium executable: apt-get install chromium, or set GPT_VIZ_CHROMIUM to one")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--disable-dev-shm-usage"])
        yield browser
        browser.close()
