"""The service benchmark's quick mode runs end to end and prints the exact RESULT keys."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support import result_values

KEYS = ["p99_ms", "lost", "dup", "api_recovery_s", "learner_restart_s", "overhead", "fuzz_5xx"]


@pytest.mark.slow
def test_service_bench_quick() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.service", "--quick"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = result_values(done.stdout)
    assert list(figures) == KEYS
    assert figures["lost"] == 0 and figures["dup"] == 0 and figures["fuzz_5xx"] == 0
    assert 0 < figures["api_recovery_s"] < 60
    assert 0 < figures["learner_restart_s"] < 30.0
    assert figures["p99_ms"] > 0
