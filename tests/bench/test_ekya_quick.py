"""``python -m deepedge.bench.ekya --quick`` runs end to end and ends with the RESULT line."""

from __future__ import annotations

import pytest

from _support import result_values
from deepedge.bench import ekya, ekya_sweep

KEYS = [
    "example_uniform",
    "example_thief",
    "gain_rel",
    "gpu_equiv",
    "oracle_gap",
    "thief_s",
    "microprofile_mae",
    "microprofile_cost_frac",
    "gain_rel_horizon",
    "gpu_equiv_horizon",
]


@pytest.mark.slow
def test_quick_benchmark_prints_result_line(capsys: pytest.CaptureFixture[str]) -> None:
    ekya.main(["--quick"])
    values = result_values(capsys.readouterr().out)
    assert list(values) == KEYS
    assert abs(values["example_uniform"] - 0.56) <= 0.02
    assert abs(values["example_thief"] - 0.73) <= 0.02
    assert values["gain_rel"] > 0.0
    assert values["gpu_equiv_horizon"] >= 1.0 or values["gain_rel_horizon"] < 0.0
    assert values["thief_s"] > 0.0
    assert 0.0 < values["microprofile_cost_frac"] < 1.0
    assert 0.0 <= values["microprofile_mae"] <= 1.0


def test_gpus_to_match_interpolates() -> None:
    curve = [(1, 0.4), (2, 0.5), (4, 0.7)]
    assert ekya_sweep.gpus_to_match(curve, 0.6) == pytest.approx(3.0)
    assert ekya_sweep.gpus_to_match(curve, 0.3) == 1.0
    assert ekya_sweep.gpus_to_match(curve, 0.9) == float("inf")
