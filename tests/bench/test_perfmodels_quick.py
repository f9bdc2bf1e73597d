"""``python -m deepedge.bench.perfmodels --quick``: a real profile and fit, RESULT line."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from _support import result_values

KEYS = ["mape_mean", "mape_compute", "mape_exec", "noise_floor"]


def _result(stdout: str) -> dict[str, float]:
    values = result_values(stdout)
    assert list(values) == KEYS
    return values


@pytest.mark.slow
@pytest.mark.stress
def test_quick_benchmark(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.perfmodels", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = _result(done.stdout)
    for key in KEYS:
        assert math.isfinite(result[key]) and result[key] >= 0, key
    assert "EstComputeTime" in done.stdout and "EstExecTime" in done.stdout
    assert "ETA" in done.stderr  # progress was shown
    assert (tmp_path / "profile.parquet").is_file()
    assert (tmp_path / "models" / "models.json").is_file()


def test_bad_data_argument(tmp_path, capsys):
    from deepedge.bench.perfmodels import main

    assert main(["--data", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: dataset")
