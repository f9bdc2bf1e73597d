"""``python -m deepedge.bench.update_job --quick``: one job through a real service, timed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _support import result_values
from deepedge.bench.update_job import parse_args

KEYS = ["median_s", "p95_s", "max_s", "failed", "on_threads", "on_ray"]


@pytest.mark.slow
def test_quick_bench_times_one_job_on_threads_with_its_phases() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.update_job", "--quick"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = result_values(done.stdout)
    assert list(figures) == KEYS
    assert (figures["failed"], figures["on_threads"], figures["on_ray"]) == (0, 1, 0)
    assert figures["median_s"] == figures["max_s"] > 0
    header = next(line for line in done.stdout.splitlines() if "to_result_s" in line)
    assert all(f"{phase}_s" in header for phase in ("start", "plan", "train", "write"))


@pytest.mark.parametrize(
    "argv", [["--jobs", "0"], ["--samples", "5000"], ["--executor", "processes"]]
)
def test_out_of_range_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
