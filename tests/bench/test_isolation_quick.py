"""The isolation benchmark's fast part, as CI runs it: every quick attack of a hostile
tenant held against a sandboxed service, and one crash case with its exactly-once counts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support import result_values

KEYS = ["attacks", "breaches", "crash_cases", "jobs_lost", "jobs_stuck", "double_runs",
        "false_failures", "duplicates", "restart_ok"]  # fmt: skip


@pytest.mark.slow
def test_the_quick_attacks_all_hold_and_a_killed_supervisor_loses_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.isolation", "--quick", "--dbs", "sqlite",
         "--targets", "supervisor"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = result_values(done.stdout)
    assert list(figures) == KEYS
    assert figures["attacks"] >= 25
    assert figures["breaches"] == 0, done.stdout
    assert figures["crash_cases"] == 1
    assert figures["jobs_lost"] == figures["jobs_stuck"] == figures["double_runs"] == 0
    assert figures["false_failures"] == figures["duplicates"] == 0
    assert figures["restart_ok"] == 1
