"""The CLI benchmark runs end to end (one call of each command) and prints its RESULT keys."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support import result_values


@pytest.mark.slow
def test_cli_bench_one_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.cli", "--runs", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = result_values(done.stdout)
    assert list(figures) == ["help_cpu_s", "complete_cpu_s", "jobs_list_cpu_s"]
    assert all(value > 0 for value in figures.values())
