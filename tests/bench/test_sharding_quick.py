"""``python -m deepedge.bench.sharding --quick``: a table and the exact RESULT keys."""

from __future__ import annotations

import pytest

from _support import result_values
from deepedge.bench.sharding import main

KEYS = [
    "speedup_mean",
    "speedup_median",
    "violations_deepedge",
    "violations_fair",
    "oracle_gap_mean",
    "plan_ms_6",
    "plan_ms_500",
    "plus_gap_mean",
    "plus_gap_max",
    "alg1_gap_mean",
    "alg1_gap_max",
    "alg1_no_plan",
    "violations_plus",
    "plus_plan_ms_6",
    "plus_plan_ms_500",
]


def test_quick_benchmark_prints_the_result_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "policy" in out and "deep-edge" in out
    values = result_values(out)
    assert list(values) == KEYS
    assert values["violations_deepedge"] == 0
    assert values["speedup_mean"] > 1.0  # Deep-Edge beats fair sharding on average
    assert values["violations_plus"] == 0
    # The oracle is exact on the same information: no policy is below it there.
    assert 0.0 <= values["plus_gap_mean"] <= values["plus_gap_max"] <= 0.05
    assert values["alg1_gap_mean"] > values["plus_gap_mean"]
    # Timings are only checked to be measured: their order is the machine's business.
    assert values["plan_ms_6"] > 0 and values["plan_ms_500"] > 0
    assert values["plus_plan_ms_6"] > 0 and values["plus_plan_ms_500"] > 0
