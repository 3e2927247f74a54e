"""Headless Chromium for gpt-train's page tests (report.html, the served explorer): gpt-viz's page tests' own
helper (packages/gpt-viz/tests/chromium.py), so that both packages find and launch it alike."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gpt_viz_chromium", Path(__file__).resolve().parents[2] / "gpt-viz" / "tests" / "chromium.py"
)
chromium = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chromium)
launched_browser = chromium.launched_browser
