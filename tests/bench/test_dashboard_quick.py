"""The dashboard page-load benchmark in --quick mode, against a service it starts itself
(with ``--browser`` where chromium is installed: CI installs it, see tests/api/conftest.py)."""

from __future__ import annotations

import shutil

import pytest

from _support import result_values
from deepedge.bench.dashboard import main

KEYS = ["loads", "dashboard_p50_ms", "dashboard_p95_ms", "page_bytes"]
HAS_BROWSER = bool(shutil.which("chromium") and shutil.which("chromedriver"))


@pytest.mark.slow
def test_quick_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--quick", "--browser"] if HAS_BROWSER else ["--quick"])
    values = result_values(capsys.readouterr().out)
    browser_keys = ["browser_p50_ms", "browser_p95_ms"] if HAS_BROWSER else []
    assert list(values) == KEYS + browser_keys
    assert values["loads"] == 20
    assert 0 < values["dashboard_p50_ms"] <= values["dashboard_p95_ms"]
    # The whole page (HTML, CSS, JS inline) is one response of a few tens of kB.
    assert 10_000 < values["page_bytes"] < 200_000
    if HAS_BROWSER:
        assert values["browser_p50_ms"] > 0
        assert values["browser_p50_ms"] <= values["browser_p95_ms"]
