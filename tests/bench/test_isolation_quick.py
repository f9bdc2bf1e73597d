"""The isolation benchmark's fast part, as CI runs it: every quick attack of a hostile
tenant against a sandboxed service holds (the crash matrix is the full run's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support import result_values

KEYS = ["attacks", "breaches", "crash_cases", "jobs_lost", "jobs_stuck", "double_runs",
        "false_failures", "duplicates", "restart_ok", "loop_period_err"]  # fmt: skip


@pytest.mark.slow
def test_the_quick_attacks_all_hold() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.isolation", "--quick", "--parts", "attacks"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = result_values(done.stdout)
    assert list(figures) == KEYS
    assert figures["attacks"] >= 25
    assert figures["breaches"] == 0, done.stdout
    assert "BREACH" not in done.stdout
