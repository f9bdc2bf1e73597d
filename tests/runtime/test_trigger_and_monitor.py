"""Trigger policy and the update status machine / three-strike book."""

from __future__ import annotations

import pytest

from deepedge.core.errors import IllegalTransitionError
from deepedge.runtime.training.monitor import StatusLog, StrikeBook, UpdateStatus, check_transition
from deepedge.runtime.training.trigger import (
    TriggerInput,
    TriggerPolicy,
    TriggerReason,
    decide_trigger,
)


@pytest.mark.parametrize(
    ("policy", "state", "reason"),
    [
        (TriggerPolicy(0.8), TriggerInput(3, 0.9, None), TriggerReason.NONE),
        (TriggerPolicy(0.8), TriggerInput(3, 0.7, None), TriggerReason.ACCURACY_DROP),
        (TriggerPolicy(0.8), TriggerInput(3, 0.95, None, requested=True), TriggerReason.REQUEST),
        (TriggerPolicy(0.8, cooldown_windows=1), TriggerInput(4, 0.5, 3), TriggerReason.NONE),
        (
            TriggerPolicy(0.8, cooldown_windows=1),
            TriggerInput(5, 0.5, 3),
            TriggerReason.ACCURACY_DROP,
        ),
        (TriggerPolicy(0.8, period_windows=3), TriggerInput(5, 0.9, 2), TriggerReason.SCHEDULE),
        (TriggerPolicy(0.8, period_windows=3), TriggerInput(4, 0.9, 2), TriggerReason.NONE),
    ],
)
def test_trigger(policy: TriggerPolicy, state: TriggerInput, reason: TriggerReason) -> None:
    decision = decide_trigger(policy, state)
    assert decision.reason is reason
    assert decision.fire is (reason is not TriggerReason.NONE)


def test_three_strikes_exclude() -> None:
    book = StrikeBook()
    assert [book.record("w") for _ in range(3)] == [1, 2, 3]
    assert book.is_excluded("w") and book.excluded == ["w"]
    assert not book.is_excluded("other")


@pytest.mark.parametrize(
    ("a", "b", "ok"),
    [
        (UpdateStatus.PENDING, UpdateStatus.PLANNING, True),
        (UpdateStatus.RUNNING, UpdateStatus.RESTARTING, True),
        (UpdateStatus.RESTARTING, UpdateStatus.PLANNING, True),
        (UpdateStatus.COMPLETED, UpdateStatus.RUNNING, False),
        (UpdateStatus.PENDING, UpdateStatus.RUNNING, False),
    ],
)
def test_transitions(a: UpdateStatus, b: UpdateStatus, ok: bool) -> None:
    if ok:
        check_transition(a, b)
    else:
        with pytest.raises(IllegalTransitionError):
            check_transition(a, b)


def test_status_log_records_events() -> None:
    seen = []
    log = StatusLog(seen.append)
    log.move(UpdateStatus.PLANNING, "plan")
    log.note("detail", x=1)
    assert [e.status for e in log.events] == [
        UpdateStatus.PENDING,
        UpdateStatus.PLANNING,
        UpdateStatus.PLANNING,
    ]
    assert seen[-1].data == {"x": 1}
