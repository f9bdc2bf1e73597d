"""Number options: NaN, infinities and out-of-range values are one ``error:`` line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
runner = CliRunner()


PLACE = str(EXAMPLES / "placement-tiny.json")
TRACE = str(EXAMPLES / "ekya-illustrative-trace.json")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["plan", "shard", str(EXAMPLES / "cluster.json"), "--noise", "nan"], "--noise"),
        (["plan", "place", PLACE, "--time-limit", "inf"], "--time-limit"),
        (["simulate", "ekya", TRACE, "--gpus", "nan"], "--gpus"),
        (["simulate", "ekya", TRACE, "--prune-max-gap", "-inf"], "--prune-max-gap"),
        (["simulate", "ekya", TRACE, "--calibration-shrinkage", "nan"], "--calibration-shrinkage"),
        (["profile", "--out", "{tmp}", "--budget-s", "nan"], "--budget-s"),
        (["perfmodels", "fit", "{tmp}", "--time-budget-s", "0"], "--time-budget-s"),
        (["perfmodels", "fit", "{tmp}", "--time-budget-s", "nan"], "--time-budget-s"),
    ],
)
def test_non_finite_or_out_of_range_number_exits_2(
    tmp_path: Path, args: list[str], flag: str
) -> None:
    result = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} must be a finite number")
