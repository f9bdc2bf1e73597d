"""The dashboard page-load benchmark in --quick mode, against a service it starts itself."""

from __future__ import annotations

import pytest

from deepedge.bench.dashboard import main


@pytest.mark.slow
def test_quick_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--quick"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT ")
    values = dict(kv.split("=") for kv in last.split()[1:])
    assert list(values) == ["loads", "dashboard_p50_ms", "dashboard_p95_ms", "page_bytes"]
    assert int(values["loads"]) == 20
    assert 0 < float(values["dashboard_p50_ms"]) <= float(values["dashboard_p95_ms"])
    # The whole page (HTML, CSS, JS inline) is one response of a few tens of kB.
    assert 10_000 < int(values["page_bytes"]) < 200_000
