"""The stop rule's measured-gain condition: a fit on a few noisy points cannot end an update
while the measured curve still sets records (learning/convergence.py, module docstring)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InvalidInputError
from deepedge.learning.convergence import (
    OptimusCurve,
    StoppingRule,
    StopReason,
    StopRuleKind,
    decide_stop,
    measured_gain,
)

RULE = StoppingRule(max_epochs=15, horizon_epochs=3, min_gain=0.005)


@pytest.mark.parametrize(
    ("accs", "horizon", "gain"),
    [
        ([0.5, 0.6], 3, None),  # k <= h: no best before the horizon
        ([0.5, 0.6, 0.7], 3, None),
        ([0.5, 0.7, 0.6, 0.65], 3, 0.2),  # best 0.7 (epoch 2) over best 0.5 (epoch 1)
        ([0.9, 0.7, 0.8, 0.85], 2, 0.0),  # dips after an early best: no gain
        ([0.6, 0.8, 0.85, 0.80, 0.84, 0.83], 3, 0.0),
        ([0.80, 0.85, 0.86, 0.862, 0.863], 3, 0.013),
    ],
)
def test_measured_gain(accs: list[float], horizon: int, gain: float | None) -> None:
    got = measured_gain(accs, horizon)
    assert got == (None if gain is None else pytest.approx(gain))


def test_measured_gain_rejects_a_bad_horizon() -> None:
    with pytest.raises(InvalidInputError):
        measured_gain([0.5, 0.6], 0)


@pytest.mark.parametrize(
    ("accs", "rule", "stop", "reason"),
    [
        # A dip at epoch 2: the monotone fit is flat (predicted gain ~0), but with k <= h
        # there is nothing measured to agree with it; the pure fit stopped here.
        ([0.80, 0.70, 0.78], RULE, False, StopReason.CONTINUE),
        # The fit says flat (0.0025 over 3 epochs) while epoch 5 set a record of +0.03.
        ([0.80, 0.85, 0.82, 0.84, 0.88, 0.84, 0.85], RULE, False, StopReason.CONTINUE),
        # Rising by 0.013 over the last 3 epochs against min_gain 0.01: not yet.
        ([0.80, 0.85, 0.86, 0.862, 0.863], StoppingRule(min_gain=0.01), False, StopReason.CONTINUE),
        # One epoch later the best rose 0.003 over 3 epochs and the fit agrees: stop.
        (
            [0.80, 0.85, 0.86, 0.862, 0.863, 0.863],
            StoppingRule(min_gain=0.01),
            True,
            StopReason.CONVERGED,
        ),
        # Noisy plateau: no record for 4 epochs after 0.90; predicted gain under min_gain.
        ([0.86, 0.9, 0.88, 0.89, 0.87, 0.89], RULE, True, StopReason.CONVERGED),
        # max_epochs still bounds an update that keeps setting records.
        ([0.1 * i for i in range(1, 6)], StoppingRule(max_epochs=5), True, StopReason.MAX_EPOCHS),
    ],
)
def test_rule_needs_the_measured_curve_to_agree(
    accs: list[float], rule: StoppingRule, stop: bool, reason: StopReason
) -> None:
    decision = decide_stop(accs, rule)
    assert decision.stop is stop
    assert decision.reason is reason


@pytest.mark.parametrize(
    ("accs", "rule"),
    [
        ([0.80, 0.70, 0.78], RULE),
        ([0.80, 0.85, 0.82, 0.84, 0.88, 0.84, 0.85], RULE),
        ([0.80, 0.85, 0.86, 0.862, 0.863], StoppingRule(min_gain=0.01)),
    ],
)
def test_the_fit_alone_would_have_stopped(accs: list[float], rule: StoppingRule) -> None:
    """The CONTINUE cases above are the ones the measured condition exists for."""
    decision = decide_stop(accs, rule)
    assert not decision.stop
    assert decision.predicted_gain is not None and decision.predicted_gain < rule.min_gain


def test_a_clean_curve_still_stops_within_a_few_epochs_of_the_fit() -> None:
    truth = OptimusCurve(2.0, 1.2, 0.05)
    rule = StoppingRule(max_epochs=50, min_gain=0.01, horizon_epochs=3)
    history: list[float] = []
    fit_only_at = None
    for k in range(1, 51):
        history.append(float(truth.predict(k)))
        decision = decide_stop(history, rule)
        gain = decision.predicted_gain
        if fit_only_at is None and gain is not None and gain < rule.min_gain:
            fit_only_at = k
        if decision.stop:
            break
    assert decision.reason is StopReason.CONVERGED
    assert fit_only_at is not None
    assert fit_only_at <= len(history) <= fit_only_at + rule.horizon_epochs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_never_converged_while_the_last_horizon_set_a_record(accs: list[float]) -> None:
    decision = decide_stop(accs, RULE)
    gain = measured_gain(accs, RULE.horizon_epochs)
    if decision.reason is StopReason.CONVERGED:
        assert gain is not None and gain < RULE.min_gain
        assert decision.predicted_gain is not None and decision.predicted_gain < RULE.min_gain


@pytest.mark.parametrize(
    ("rule", "accs", "stop", "at_chance"),
    [
        # At chance (1/20 classes) a flat curve has learned nothing: it never converges.
        (StopRuleKind.OPTIMUS, [0.05, 0.053, 0.05, 0.052], False, True),
        (StopRuleKind.PLATEAU, [0.05, 0.053, 0.05, 0.052], False, True),
        # The same flat curve well above chance has converged.
        (StopRuleKind.OPTIMUS, [0.90, 0.903, 0.902, 0.903], True, False),
        (StopRuleKind.PLATEAU, [0.90, 0.903, 0.902, 0.903], True, False),
        # A fixed rule runs max_epochs whatever the curve.
        (StopRuleKind.FIXED, [0.90, 0.903, 0.902, 0.903], False, False),
        # Plateau stops on the measured best alone, where the fit would still see a gain.
        (StopRuleKind.PLATEAU, [0.5, 0.9, 0.9, 0.9, 0.9], True, False),
    ],
)
def test_the_rule_and_chance(
    rule: StopRuleKind, accs: list[float], stop: bool, at_chance: bool
) -> None:
    config = StoppingRule(
        max_epochs=30, horizon_epochs=3, min_gain=0.005, rule=rule, chance_accuracy=0.05
    )
    decision = decide_stop(accs, config)
    assert decision.stop is stop and decision.at_chance is at_chance
    if stop:
        assert decision.reason is StopReason.CONVERGED


def test_at_chance_an_update_still_ends_at_max_epochs() -> None:
    config = StoppingRule(max_epochs=4, chance_accuracy=0.5)
    decision = decide_stop([0.5, 0.5, 0.52, 0.5], config)
    assert decision.stop and decision.reason is StopReason.MAX_EPOCHS and decision.at_chance


def test_on_a_small_validation_set_guessing_is_not_convergence() -> None:
    """3 right out of 12 at six classes is what a guesser scores: the rule trains on and
    says the model is at chance, though 0.25 is over chance + the plain margin (0.217)."""
    from deepedge.learning.convergence import chance_threshold

    rule = StoppingRule(min_epochs=3, max_epochs=10, chance_accuracy=1 / 6, chance_margin=0.05)
    flat = [0.25, 0.25, 1 / 12, 0.25]
    assert decide_stop(flat, rule).reason is StopReason.CONVERGED  # the plain margin
    decision = decide_stop(flat, rule, validation_size=12)
    assert not decision.stop and decision.at_chance
    # Many samples: the plain margin again; a real model is never held back.
    assert chance_threshold(1 / 6, 0.05, 100_000) == pytest.approx(1 / 6 + 0.05)
    assert not decide_stop([0.9, 0.91, 0.91, 0.91], rule, validation_size=12).at_chance


def test_on_unbalanced_labels_chance_is_the_most_frequent_class() -> None:
    """A model collapsed to one class (what a diverging learning rate left of a tabular MLP
    in a benchmark run: 0.708 on 2 classes, 'trained' without a word) scores the majority's
    share: that, not 1 / classes, is what learning nothing scores."""
    from deepedge.learning.convergence import chance_threshold, constant_guess_accuracy

    labels = [0] * 17 + [1] * 7
    assert constant_guess_accuracy(labels, 2) == pytest.approx(17 / 24)
    assert constant_guess_accuracy([], 4) == pytest.approx(0.25)
    assert constant_guess_accuracy([2, 2, -1], 3) == pytest.approx(1.0)  # unlabelled left out
    assert constant_guess_accuracy([0, 1, 2, 3], 4) == pytest.approx(0.25)  # balanced: 1 / k
    chance = constant_guess_accuracy(labels, 2)
    rule = StoppingRule(min_epochs=3, max_epochs=10, chance_accuracy=chance, chance_margin=0.05)
    decision = decide_stop([17 / 24] * 4, rule, validation_size=24)
    assert not decision.stop and decision.at_chance
    assert 17 / 24 <= chance_threshold(chance, 0.05, 24) < 0.95
    assert not decide_stop([0.95, 0.96, 0.96, 0.96], rule, validation_size=24).at_chance
