"""The placement benchmark in --quick mode: RESULT keys, plots, plausible figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support import result_values
from deepedge.bench.placement import main

KEYS = ["p1_s", "p2_s", "k_latency_drop_low", "k_latency_drop_high", "medium_gap",
        "scale_s", "scale_vs_milp", "scale_gap", "heuristic_gap_mean",
        "heuristic_gap_max"]  # fmt: skip


@pytest.mark.slow
def test_quick_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--quick", "--out", str(tmp_path)])
    nums = result_values(capsys.readouterr().out)
    assert list(nums) == KEYS
    assert nums["p1_s"] > 0 and nums["p2_s"] > 0  # times: recorded by the benchmark, not judged
    assert nums["k_latency_drop_low"] > 0  # co-location lowers latency
    assert 0 <= nums["medium_gap"] < 1 and 0 <= nums["scale_gap"] < 1
    assert 0 <= nums["heuristic_gap_mean"] <= nums["heuristic_gap_max"] <= 0.10
    for png in ("placement_colocation.png", "placement_load.png", "placement_tradeoff.png"):
        assert (tmp_path / png).stat().st_size > 1000
