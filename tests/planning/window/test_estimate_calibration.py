"""Online calibration of the micro-profiler's accuracy estimates from past windows."""

from __future__ import annotations

import random

import pytest
from _recording_thief import RecordingThief

from deepedge.core.errors import InvalidInputError
from deepedge.planning.window.documents import WindowProblem
from deepedge.planning.window.estimate_calibration import (
    CalibrationScope,
    CalibrationSpec,
    EstimateCalibration,
    config_family,
)
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.simulator import simulate
from deepedge.sim.trace import EkyaTrace, TraceWindow


def test_residuals_count_only_after_their_window_closes() -> None:
    cal = EstimateCalibration(CalibrationSpec(CalibrationScope.STREAM, shrinkage=0.0))
    cal.observe("a", "e1-x", estimate=0.6, measured=0.8)
    # Measured in the window being planned: no effect on that window's estimates.
    assert cal.corrected("a", "e1-x", 0.5) == 0.5
    assert cal.observations() == 0
    cal.close_window()
    assert cal.corrected("a", "e1-x", 0.5) == pytest.approx(0.7)
    assert cal.corrected("b", "e1-x", 0.5) == 0.5  # another stream: no history
    assert cal.corrected("a", "e1-x", 0.95) == 1.0  # clipped


def test_shrinkage_and_scopes() -> None:
    def filled(scope: CalibrationScope, k: float) -> EstimateCalibration:
        cal = EstimateCalibration(CalibrationSpec(scope, k))
        cal.observe("a", "e1-x", 0.5, 0.7)  # +0.2
        cal.observe("a", "e8-x", 0.5, 0.3)  # -0.2
        cal.observe("b", "e1-y", 0.5, 0.6)  # +0.1
        cal.close_window()
        return cal

    pooled = filled(CalibrationScope.POOLED, 0.0)
    assert pooled.correction("z", "any") == pytest.approx(0.1 / 3)
    stream = filled(CalibrationScope.STREAM, 2.0)
    assert stream.correction("a", "e3-x") == pytest.approx(0.0)  # (+0.2 - 0.2) / (2 + 2)
    assert stream.correction("b", "e3-x") == pytest.approx(0.1 / 3)  # 0.1 / (1 + 2)
    family = filled(CalibrationScope.FAMILY, 0.0)
    assert family.correction("a", "e1-z") == pytest.approx(0.2)
    assert family.correction("a", "e8-z") == pytest.approx(-0.2)
    assert family.correction("a", "e3-z") == 0.0
    assert config_family("e3-f30-z1") == "e3" and config_family("cfg1") == "cfg1"
    with pytest.raises(InvalidInputError):
        CalibrationSpec(shrinkage=-1.0)


@pytest.mark.parametrize("scope", list(CalibrationScope))
def test_reduces_error_on_a_biased_trace(scope: CalibrationScope) -> None:
    # Per stream, the profiler underestimates by a stream-specific bias plus noise.
    rng = random.Random(15)
    bias = {"a": 0.12, "b": 0.08}
    cal = EstimateCalibration(CalibrationSpec(scope, shrinkage=1.0))
    raw_err: list[float] = []
    cal_err: list[float] = []
    for _window in range(12):
        for sid, b in bias.items():
            for config in ("e1-x", "e3-x"):
                truth = rng.uniform(0.4, 0.8)
                estimate = truth - b + rng.gauss(0.0, 0.02)
                raw_err.append(abs(truth - estimate))
                cal_err.append(abs(truth - cal.corrected(sid, config, estimate)))
                cal.observe(sid, config, estimate, truth)
        cal.close_window()
    assert sum(cal_err) < 0.5 * sum(raw_err)


def _underestimated(trace: EkyaTrace, by: float) -> EkyaTrace:
    windows = []
    for window in trace.windows:
        rows = [
            row.model_copy(
                update={
                    "retraining": [
                        c.model_copy(update={"estimated_accuracy_after": c.accuracy_after - by})
                        for c in row.retraining
                    ]
                }
            )
            for row in window.streams
        ]
        windows.append(TraceWindow(streams=rows))
    return trace.model_copy(update={"windows": windows})


def _first_estimates(problem: WindowProblem) -> dict[tuple[str, str], float]:
    return {
        (s.stream_id, c.name): c.accuracy_after
        for s in problem.streams
        for c in s.retraining_configs
    }


def test_simulator_calibrates_from_earlier_windows_only() -> None:
    trace = _underestimated(illustrative_trace(), 0.1)
    spec = CalibrationSpec(CalibrationScope.POOLED, shrinkage=0.0)
    plain_rec, cal_rec = RecordingThief(), RecordingThief()
    plain = simulate(trace, plain_rec, deviation_tolerance=None)
    calibrated = simulate(trace, cal_rec, deviation_tolerance=None, calibration=spec)
    # Window 0 has no history: the same plan and outcome as without calibration.
    assert calibrated.windows[0] == plain.windows[0]
    assert any(calibrated.windows[0].retrained)
    # Window 1's first plan sees every estimate raised by the residual measured in window 0
    # (+0.1 on every finished retraining), capped at 1.
    first_of_w1 = plain.windows[0].plans
    before = _first_estimates(plain_rec.problems[first_of_w1])
    after = _first_estimates(cal_rec.problems[first_of_w1])
    assert before.keys() == after.keys() and before
    for key, value in before.items():
        assert after[key] == pytest.approx(min(1.0, value + 0.1), abs=1e-5)
    # No bias: residuals are 0 and nothing changes in any window.
    exact = illustrative_trace()
    assert simulate(exact, ThiefScheduler(), calibration=spec) == simulate(exact, ThiefScheduler())
