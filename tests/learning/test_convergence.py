"""The Optimus fit recovers known curves; the dynamic stopping rule stops when it should."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InvalidInputError
from deepedge.learning.convergence import (
    OptimusCurve,
    StoppingRule,
    StopReason,
    decide_stop,
    fit_optimus,
)


@pytest.mark.parametrize(
    ("b0", "b1", "b2"),
    [(0.5, 2.0, 0.05), (1.5, 1.2, 0.1), (0.2, 3.0, 0.0), (3.0, 1.05, 0.2)],
)
def test_fit_recovers_known_parameters(b0: float, b1: float, b2: float) -> None:
    truth = OptimusCurve(b0, b1, b2)
    k = np.arange(1, 13)
    fitted = fit_optimus(k, truth.predict(k))
    assert fitted.b0 == pytest.approx(b0, rel=1e-3, abs=1e-4)
    assert fitted.b1 == pytest.approx(b1, rel=1e-3, abs=1e-4)
    assert fitted.b2 == pytest.approx(b2, abs=1e-4)
    assert fitted.rmse < 1e-6


def test_fit_with_noise_extrapolates() -> None:
    truth = OptimusCurve(0.8, 1.5, 0.08)
    k = np.arange(1, 9)
    noisy = truth.predict(k) + np.random.default_rng(0).normal(0, 0.005, len(k))
    fitted = fit_optimus(k, np.clip(noisy, 0, 1))
    assert float(fitted.predict(30)) == pytest.approx(float(truth.predict(30)), abs=0.02)
    assert fitted.asymptote == pytest.approx(truth.asymptote, abs=0.03)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=15))
def test_fitted_parameters_are_never_negative(accs: list[float]) -> None:
    curve = fit_optimus(np.arange(1, len(accs) + 1), accs)
    assert curve.b0 >= 0 and curve.b1 > 0 and curve.b2 >= 0
    assert math.isfinite(curve.rmse)


def test_epochs_still_needed_and_to_accuracy() -> None:
    curve = OptimusCurve(1.0, 1.0, 0.1)  # acc(k) = 0.9 - 1/(k+1)
    assert curve.epochs_still_needed(3, 0.05) == 16  # 1/(k+1) <= 0.05 at k = 19
    assert curve.epochs_still_needed(19, 0.05) == 0
    assert curve.epochs_to_accuracy(0.8) == pytest.approx(9.0)
    assert curve.epochs_to_accuracy(0.95) == math.inf
    assert OptimusCurve(0.0, 2.0, 0.0).epochs_still_needed(5, 0.1) == math.inf


@pytest.mark.parametrize(
    ("accs", "rule", "stop", "reason"),
    [
        ([0.5, 0.6], StoppingRule(), False, StopReason.CONTINUE),
        ([0.3, 0.5, 0.6, 0.65], StoppingRule(min_gain=0.005), False, StopReason.CONTINUE),
        (
            [0.80, 0.85, 0.86, 0.862, 0.863, 0.863],
            StoppingRule(min_gain=0.01),
            True,
            StopReason.CONVERGED,
        ),
        ([0.3, 0.5, 0.6], StoppingRule(max_epochs=3), True, StopReason.MAX_EPOCHS),
        ([0.3, 0.95], StoppingRule(target_accuracy=0.9), True, StopReason.TARGET_REACHED),
    ],
)
def test_stopping_rule(
    accs: list[float], rule: StoppingRule, stop: bool, reason: StopReason
) -> None:
    decision = decide_stop(accs, rule)
    assert decision.stop is stop
    assert decision.reason is reason


def test_early_stopping_triggers_before_max_epochs_on_a_converging_curve() -> None:
    truth = OptimusCurve(2.0, 1.2, 0.05)
    rule = StoppingRule(max_epochs=50, min_gain=0.01, horizon_epochs=3)
    history: list[float] = []
    for k in range(1, 51):
        history.append(float(truth.predict(k)))
        decision = decide_stop(history, rule)
        if decision.stop:
            break
    assert decision.reason is StopReason.CONVERGED
    assert len(history) < 20
    assert truth.gain(len(history), 3) < 0.01


@pytest.mark.parametrize(
    ("epochs", "accs"),
    [([1], [0.5]), ([1, 2], [0.5]), ([1, 2], [0.5, 1.5]), ([-1, 2], [0.5, 0.6])],
)
def test_bad_inputs_are_rejected(epochs: list[float], accs: list[float]) -> None:
    with pytest.raises(InvalidInputError):
        fit_optimus(epochs, accs)
