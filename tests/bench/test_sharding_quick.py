"""``python -m deepedge.bench.sharding --quick``: a table and the exact RESULT keys."""

from __future__ import annotations

import pytest

from deepedge.bench.sharding import main

KEYS = [
    "speedup_mean",
    "speedup_median",
    "violations_deepedge",
    "violations_fair",
    "oracle_gap_mean",
    "plan_ms_6",
    "plan_ms_500",
]


def test_quick_benchmark_prints_the_result_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert "policy" in "\n".join(out) and "deep-edge" in "\n".join(out)
    last = out[-1]
    assert last.startswith("RESULT ")
    pairs = dict(item.split("=") for item in last.removeprefix("RESULT ").split())
    assert list(pairs) == KEYS
    values = {k: float(v) for k, v in pairs.items()}
    assert values["violations_deepedge"] == 0
    assert values["speedup_mean"] > 1.0  # Deep-Edge beats fair sharding on average
    assert values["oracle_gap_mean"] >= -1e-9
    # Timings are only checked to be measured: their order is the machine's business.
    assert values["plan_ms_6"] > 0 and values["plan_ms_500"] > 0
