"""``python -m deepedge.bench.ekya --quick`` runs end to end and ends with the RESULT line."""

from __future__ import annotations

import math

import pytest

from _support import result_values
from deepedge.bench import ekya, ekya_sweep
from deepedge.planning.window.reprofiling import ReprofileSpec
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.trace import EkyaTrace, TraceWindow

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


def _profiled(profiling_s: float, reprofiling_s: float, made: int) -> EkyaTrace:
    """The paper's example with recorded profiling seconds and ``made`` further profiles."""
    trace = illustrative_trace()
    windows = []
    for window in trace.windows:
        rows = [
            row.model_copy(
                update={
                    "profiling_s": profiling_s,
                    "reprofiling_s": reprofiling_s,
                    "retraining": [
                        c.model_copy(update={"reprofiled_accuracy_after": [0.5] * made})
                        for c in row.retraining
                    ],
                }
            )
            for row in window.streams
        ]
        windows.append(TraceWindow(streams=rows))
    return trace.model_copy(update={"windows": windows})


@pytest.mark.parametrize(
    ("spec", "further_share"),
    [(None, 0.0), (ReprofileSpec(2, top_k=1), 0.25), (ReprofileSpec(3), 1.0),
     (ReprofileSpec(2), 0.5), (ReprofileSpec(3, top_k=9), 1.0)],
)  # fmt: skip
def test_profiling_cost_counts_the_candidates_further_profiles(
    spec: ReprofileSpec | None, further_share: float
) -> None:
    trace = _profiled(profiling_s=3.0, reprofiling_s=8.0, made=2)
    exhaustive = sum(c.gpu_seconds for w in trace.windows for r in w.streams for c in r.retraining)
    rows = sum(len(w.streams) for w in trace.windows)
    n_configs = len(trace.windows[0].streams[0].retraining)
    assert n_configs == 2  # top 1 of 2 configs: half of each further profile's seconds
    expected = rows * (3.0 + 8.0 * further_share) / exhaustive
    assert ekya_sweep.profiling_cost_frac(trace, spec) == pytest.approx(expected)
    assert math.isnan(ekya_sweep.profiling_cost_frac(illustrative_trace()))
