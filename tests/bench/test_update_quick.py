"""``python -m deepedge.bench.update --quick``: a table and the exact RESULT keys."""

from __future__ import annotations

import math

import pytest

from deepedge.bench.update import main

KEYS = ["speedup", "ps_throughput_ratio", "recovered_frac", "fault_acc_delta"]


@pytest.mark.slow
@pytest.mark.ray
def test_quick_benchmark_prints_the_result_line(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    text = "\n".join(out)
    assert "EMULATED" in text and "speedup (measured)" in text
    last = out[-1]
    assert last.startswith("RESULT ")
    pairs = dict(item.split("=") for item in last.removeprefix("RESULT ").split())
    assert list(pairs) == KEYS
    values = {k: float(v) for k, v in pairs.items()}
    assert all(math.isfinite(v) for v in values.values())
    assert values["speedup"] > 0 and values["ps_throughput_ratio"] > 0
    assert values["fault_acc_delta"] >= 0
