"""The update status machine and the three-strike book (the trigger rule is tested in
tests/learning/test_trigger.py)."""

from __future__ import annotations

import pytest

from deepedge.core.errors import IllegalTransitionError
from deepedge.runtime.training.monitor import StatusLog, StrikeBook, UpdateStatus, check_transition


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
