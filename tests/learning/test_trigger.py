"""The one trigger rule, table-driven (the control plane and the standalone loop use it)."""

from __future__ import annotations

import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.learning.trigger import TriggerFacts, TriggerKind, TriggerPolicy, decide_trigger

T = TriggerKind
P = TriggerPolicy


@pytest.mark.parametrize(
    ("policy", "facts", "expected"),
    [
        (P(0.8), TriggerFacts(5, 0.95, None, requested=True), T.REQUEST),
        (P(0.8), TriggerFacts(5, 0.79, None), T.ACCURACY_DROP),
        (P(0.8), TriggerFacts(5, 0.80, None), T.NONE),
        # too few labelled samples to tell: never a drop, the other rules still apply
        (P(0.8), TriggerFacts(5, None, None), T.NONE),
        (P(0.8, sample_count=10), TriggerFacts(5, None, None, 10), T.SAMPLE_COUNT),
        # inside the cooldown after an update a drop is ignored, just after it counts
        (P(0.8, cooldown_windows=2), TriggerFacts(6, 0.1, 4), T.NONE),
        (P(0.8, cooldown_windows=2), TriggerFacts(7, 0.1, 4), T.ACCURACY_DROP),
        (P(0.8, sample_count=500), TriggerFacts(3, 0.9, None, 499), T.NONE),
        (P(0.8, sample_count=500), TriggerFacts(3, 0.9, None, 500), T.SAMPLE_COUNT),
        (P(0.8, period_windows=4), TriggerFacts(2, 0.9, None), T.NONE),
        (P(0.8, period_windows=4), TriggerFacts(3, 0.9, None), T.SCHEDULE),
        (P(0.8, period_windows=4), TriggerFacts(9, 0.9, 6), T.NONE),
        (P(0.8, period_windows=4), TriggerFacts(10, 0.9, 6), T.SCHEDULE),
        # the order: a request before a drop before a count before a schedule
        (P(0.8, sample_count=1, period_windows=1), TriggerFacts(9, 0.1, 0, 5, True), T.REQUEST),
        (P(0.8, sample_count=1, period_windows=1), TriggerFacts(9, 0.1, 0, 5), T.ACCURACY_DROP),
        (P(0.8, sample_count=1, period_windows=1), TriggerFacts(9, 0.9, 0, 5), T.SAMPLE_COUNT),
    ],
)  # fmt: skip
def test_trigger(policy: TriggerPolicy, facts: TriggerFacts, expected: TriggerKind) -> None:
    assert decide_trigger(policy, facts) is expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"accuracy_threshold": 1.5}, "threshold"), ({"period_windows": 0}, "period_windows"),
     ({"cooldown_windows": -1}, "cooldown_windows"), ({"sample_count": 0}, "sample_count")],
)  # fmt: skip
def test_a_bad_policy_names_its_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        TriggerPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
