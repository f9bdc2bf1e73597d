"""The dashboard page-load benchmark in --quick mode, against a service it starts itself
(with ``--browser`` where chromium is installed: CI installs it, see tests/api/conftest.py)."""

from __future__ import annotations

import shutil

import pytest

from deepedge.bench.dashboard import main

KEYS = ["loads", "dashboard_p50_ms", "dashboard_p95_ms", "page_bytes"]
HAS_BROWSER = bool(shutil.which("chromium") and shutil.which("chromedriver"))


@pytest.mark.slow
def test_quick_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--quick", "--browser"] if HAS_BROWSER else ["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT ")
    values = dict(kv.split("=") for kv in last.split()[1:])
    browser_keys = ["browser_p50_ms", "browser_p95_ms"] if HAS_BROWSER else []
    assert list(values) == KEYS + browser_keys
    assert int(values["loads"]) == 20
    assert 0 < float(values["dashboard_p50_ms"]) <= float(values["dashboard_p95_ms"])
    # The whole page (HTML, CSS, JS inline) is one response of a few tens of kB.
    assert 10_000 < int(values["page_bytes"]) < 200_000
    if HAS_BROWSER:
        assert float(values["browser_p50_ms"]) > 0
        assert float(values["browser_p50_ms"]) <= float(values["browser_p95_ms"])
