"""bench.accuracy's measures on synthetic inputs (no site)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from deepedge.bench.accuracy_parts import (
    Decision,
    DecisionKind,
    Request,
    first_answers,
    gain,
    judge,
    judged_windows,
    percentile,
    ratio,
    recovery_s,
    recovery_windows,
    served_hits,
    update_times,
    version_hits,
    window_accuracy,
    window_starts,
)
from deepedge.bench.accuracy_parts import decisions as decisions_of

STARTS = [100.0 + 5 * w for w in range(12)]  # windows of 5 s from t = 100


def test_served_accuracy_per_window_counts_answered_requests() -> None:
    requests = [Request(0, 0, 1, 1, 1, 101.0, 100.5), Request(0, 1, 2, 3, 1, 101.5, 101.0),
                Request(2, 0, 4, 4, 2, 111.0, 110.5)]  # fmt: skip
    hits = served_hits(requests)
    assert hits == {0: (1, 2), 2: (1, 1)}
    accuracy = window_accuracy(hits, 4)
    assert accuracy[0] == 0.5 and accuracy[2] == 1.0
    assert np.isnan(accuracy[1]) and np.isnan(accuracy[3])  # nothing answered


def test_ratio_and_gain_use_the_windows_both_series_have() -> None:
    served = np.array([0.8, 0.4, np.nan, 0.9])
    reference = np.array([1.0, 0.8, 0.9, np.nan])
    assert ratio(served, reference) == pytest.approx(0.6 / 0.9)
    assert gain(served, np.array([0.6, 0.6, 0.6, 0.6])) == pytest.approx(0.1)  # 0.7 - 0.6
    assert math.isnan(ratio(np.array([np.nan]), np.array([0.5])))


@pytest.mark.parametrize(
    ("served", "expected_s"),
    [
        ([0.9, 0.9, 0.9, 0.9], 0.0),  # never dropped: recovered from the first window
        ([0.3, 0.5, 0.88, 0.9], 10.0),  # within 3 points from the third window on
        ([0.3, 0.9, 0.5, 0.9], 15.0),  # a relapse: only the last window stays
        ([0.3, 0.5, 0.6, 0.6], math.inf),  # never
        ([0.3, np.nan, 0.9, 0.9], 10.0),  # a window without answers is not recovered
    ],
)
def test_recovery_is_the_first_window_from_which_every_window_stays_near_the_reference(
    served: list[float], expected_s: float
) -> None:
    series = np.array([0.2, 0.2, *served, 0.2])  # the drift's segment is windows 2-5
    reference = np.full(7, 0.9)
    assert recovery_s(series, reference, STARTS, first=2, end=6) == expected_s


def test_recovery_windows_is_the_first_window_near_the_reference() -> None:
    reference = np.full(6, 0.9)
    served = np.array([0.1, 0.1, 0.5, 0.87, 0.4, 0.9])
    assert recovery_windows(served, reference, first=2, end=6) == 1.0
    assert recovery_windows(served, reference, first=3, end=6) == 0.0
    assert recovery_windows(np.zeros(6), reference, first=2, end=6) == math.inf


def _event(seq: int, kind: str, version: int, at: float, **detail: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "version": version, "at": at, "message": kind,
            "detail": detail}  # fmt: skip


EVENTS = [
    _event(1, "promoted", 1, 90.0),  # the first version: no choice
    _event(2, "trigger", 2, 104.0),
    _event(3, "canary-started", 2, 112.0),
    _event(4, "promoted", 2, 117.0),  # after its canary
    _event(5, "trigger", 3, 121.0),
    _event(6, "canary-started", 3, 126.0),
    _event(7, "rolled-back", 3, 131.0),  # the canary's verdict: v2 keeps serving
    _event(8, "promoted", 1, 140.0, restored=True),  # a kept version again
    _event(9, "rolled-back", 1, 148.0, to_version=2),  # v1 served worse than v2
    _event(10, "trigger", 4, 149.0),
    _event(11, "job-failed", 4, 150.0),
    _event(12, "trigger", 5, 151.0),
    _event(13, "gate-failed", 5, 152.0),
    _event(14, "trigger", 6, 153.0),
    _event(15, "promoted", 6, 154.5),  # without a canary
]


def test_decisions_name_the_version_chosen_and_the_alternative() -> None:
    found = [(d.kind, d.chosen, d.alternative) for d in decisions_of(EVENTS)]
    assert found == [
        (DecisionKind.CANARY_PROMOTION, 2, 1),
        (DecisionKind.CANARY_ROLLBACK, 2, 3),
        (DecisionKind.RESTORE, 1, 2),
        (DecisionKind.ROLLBACK, 2, 1),
        (DecisionKind.PROMOTION, 6, 2),
    ]
    assert decisions_of(list(reversed(EVENTS)))[0].kind is DecisionKind.CANARY_PROMOTION


def test_a_decision_is_judged_on_the_windows_after_it() -> None:
    assert judged_windows(117.0, STARTS) == (4, 5, 6)  # window 4 starts at 120
    assert judged_windows(120.0, STARTS) == (4, 5, 6)
    assert judged_windows(152.0, STARTS) == (11,)  # the trace's end
    assert judged_windows(200.0, STARTS) == ()
    decision = Decision(117.0, DecisionKind.CANARY_PROMOTION, 2, 1, "")
    # v2 right 80 of 100 a window, v1 85: the version chosen is 5 points worse
    hits = {2: {w: (80, 100) for w in range(12)}, 1: {w: (85, 100) for w in range(12)}}
    verdict = judge(decision, STARTS, hits)
    assert verdict.windows == (4, 5, 6) and verdict.chosen_accuracy == pytest.approx(0.8)
    assert verdict.wrong
    close = {2: {w: (84, 100) for w in range(12)}, 1: {w: (85, 100) for w in range(12)}}
    assert not judge(decision, STARTS, close).wrong  # 1 point: within the margin
    # only the windows after it count: v2 was worse before, better after
    later = {2: {w: (50 if w < 4 else 95, 100) for w in range(12)},
             1: {w: (85, 100) for w in range(12)}}  # fmt: skip
    assert not judge(decision, STARTS, later).wrong
    unjudged = judge(Decision(300.0, DecisionKind.ROLLBACK, 1, 2, ""), STARTS, hits)
    assert not unjudged.judged and not unjudged.wrong


def test_update_times_run_from_the_trigger_to_the_version_s_first_answer() -> None:
    requests = [Request(0, 0, 0, 0, 2, 113.5, 113.0), Request(0, 1, 0, 0, 2, 112.5, 112.0),
                Request(0, 2, 0, 0, 6, 155.0, 154.5)]  # fmt: skip
    assert first_answers(requests) == {2: 112.5, 6: 155.0}
    updates = {u.version: u for u in update_times(EVENTS, first_answers(requests))}
    assert updates[2].seconds == pytest.approx(8.5) and updates[2].outcome == "answered"
    assert updates[3].seconds is None and updates[3].outcome == "rolled-back"
    assert updates[4].outcome == "job-failed" and updates[5].outcome == "rejected"
    assert updates[6].seconds == pytest.approx(2.0)
    assert percentile([8.5, 2.0], 50) == pytest.approx(5.25)
    assert math.isnan(percentile([], 95))


def test_version_hits_score_a_model_on_the_requests_images() -> None:
    images = np.arange(6, dtype=np.float32).reshape(6, 1)  # image i "shows" class i % 3

    def predict(x: np.ndarray) -> np.ndarray:
        return (x[:, 0].astype(int) % 3).astype(np.int64)

    requests = [Request(0, i, label, -1, 1, 0.0, 0.0) for i, label in [(0, 0), (4, 1), (5, 0)]]
    assert version_hits(predict, images, requests) == (2, 3)
    assert version_hits(predict, images, []) == (0, 0)


def test_a_window_starts_when_its_first_request_was_sent() -> None:
    """A camera held back by its requests in flight sends later than scheduled."""
    scheduled = [0.0, 5.0, 10.0]
    requests = [Request(0, 0, 0, 0, 1, 2.0, 0.1), Request(1, 0, 0, 0, 1, 70.0, 62.0),
                Request(1, 1, 0, 0, 1, 69.0, 61.5)]  # fmt: skip
    assert window_starts(requests, scheduled) == [0.1, 61.5, 10.0]  # window 2: unanswered
