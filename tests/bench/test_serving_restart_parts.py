"""The restart benchmark's judgement of health against the requests it sent (the run
itself needs a site with Ray and minutes under stress-ng: it is run by hand, see
BENCHMARKS.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.bench.serving_restart_parts import Attempt, Sighting, judge
from deepedge.controlplane.data_plane_health import DataPlaneState

STARTING, SERVING, FAILED = DataPlaneState.STARTING, DataPlaneState.SERVING, DataPlaneState.FAILED


def said(at_s: float, state: DataPlaneState | None, status: int = 200) -> Sighting:
    return Sighting(at_s, status if state is None else 200, state)


def sent(at_s: float, status: int, took_s: float = 0.1) -> Attempt:
    return Attempt(at_s, at_s + took_s, status)


def refused_until(end_s: float, status: int = 0) -> list[Attempt]:
    return [sent(t / 2, status) for t in range(-2, int(2 * end_s))]


CASES = [
    pytest.param(  # the honest restart: no answer, failed, starting, then serving
        [said(-0.5, None, 0), said(2.0, FAILED), said(5.0, STARTING), said(30.0, SERVING)],
        [*refused_until(30.0), sent(30.2, 200)],
        (30.3, 30.0, 0, True),
        ["no answer", "failed", "starting", "serving"],
        id="honest",
    ),
    pytest.param(  # serving said at 10 s while requests sent at 10-29.5 s still failed
        [said(5.0, STARTING), said(10.0, SERVING), said(20.0, SERVING)],
        [*refused_until(30.0, 503), sent(30.0, 200)],
        (30.1, 10.0, 2, False),
        ["starting", "serving"],
        id="premature",
    ),
    pytest.param(  # serving said before the first answer, but every request after it served
        [said(5.0, STARTING), said(20.0, SERVING)],
        [*refused_until(20.0), sent(20.0, 200, took_s=3.0), sent(20.5, 200)],
        (20.6, 20.0, 0, True),
        ["starting", "serving"],
        id="held-requests-served",
    ),
    pytest.param(  # never served, and health never said so either: not truthful
        [said(1.0, STARTING), said(60.0, DataPlaneState.RETRYING)],
        refused_until(60.0),
        (None, None, 0, False),
        ["starting", "retrying"],
        id="never-served",
    ),
    pytest.param(  # served, but health kept saying starting: not truthful
        [said(1.0, STARTING), said(40.0, STARTING)],
        [*refused_until(10.0), sent(10.0, 200)],
        (10.1, None, 0, False),
        ["starting"],
        id="health-stuck",
    ),
    pytest.param(  # a failure after the first 200 does not make serving premature
        [said(1.0, STARTING), said(10.0, SERVING)],
        [*refused_until(9.0), sent(9.5, 200), sent(10.5, 503), sent(11.0, 200)],
        (9.6, 10.0, 0, True),
        ["starting", "serving"],
        id="flaky-after-serving",
    ),
    pytest.param(  # the API answering errors is no claim of serving
        [said(0.5, None, 500), said(1.0, None, 500), said(3.0, SERVING)],
        [*refused_until(3.0), sent(3.0, 200)],
        (3.1, 3.0, 0, True),
        ["HTTP 500", "serving"],
        id="api-errors",
    ),
]


@pytest.mark.parametrize(("sightings", "attempts", "expected", "labels"), CASES)
def test_judge(
    sightings: list[Sighting],
    attempts: list[Attempt],
    expected: tuple[float | None, float | None, int, bool],
    labels: list[str],
) -> None:
    verdict = judge(sightings, attempts)
    first_200, first_serving, premature, truthful = expected
    assert verdict.first_200_s == (None if first_200 is None else pytest.approx(first_200))
    assert verdict.first_serving_s == first_serving
    assert verdict.premature == premature
    assert verdict.truthful is truthful
    assert [span.label for span in verdict.spans] == labels


@pytest.mark.parametrize(
    ("sightings", "first_200_at", "failed_midway_s"),
    [
        # the old host's document read failed before the new host writes: not midway
        ([said(1.0, FAILED), said(2.0, STARTING), said(9.0, SERVING)], 9.0, 0.0),
        # a start that went silent: failed from 4 s until the first 200 at 9 s
        ([said(1.0, FAILED), said(2.0, STARTING), said(4.0, FAILED), said(6.0, FAILED)],
         9.0, 5.0),
        # failed midway, then starting again at 7 s (the next sighting ends it)
        ([said(2.0, STARTING), said(4.0, FAILED), said(7.0, STARTING)], 9.0, 3.0),
        # never served: failed until the last sighting, nothing after it counts
        ([said(2.0, STARTING), said(4.0, FAILED), said(8.0, FAILED)], None, 4.0),
    ],
)  # fmt: skip
def test_failed_midway_counts_failed_after_starting_until_the_first_200(
    sightings: list[Sighting], first_200_at: float | None, failed_midway_s: float
) -> None:
    attempts = [] if first_200_at is None else [Attempt(first_200_at - 0.1, first_200_at, 200)]
    assert judge(sightings, attempts).failed_midway_s == pytest.approx(failed_midway_s)


def test_failures_are_counted_by_kind_on_each_side_of_the_first_200() -> None:
    attempts = [sent(0.0, 0), sent(0.5, 503), sent(1.0, 404), sent(1.5, 502), sent(2.0, 200),
                sent(2.5, 503), sent(3.0, 0)]  # fmt: skip
    verdict = judge([said(2.0, SERVING)], attempts)
    before, after = verdict.before_200, verdict.after_200
    assert (before.http_5xx, before.other_status, before.no_answer) == (2, 1, 1)
    assert (after.http_5xx, after.other_status, after.no_answer) == (1, 0, 1)
    assert before.total == 4


def test_a_span_keeps_its_reasons_once_each_in_order_and_its_extent() -> None:
    sightings = [Sighting(1.0, 200, DataPlaneState.RETRYING, "Ray's head timed out"),
                 Sighting(1.5, 200, DataPlaneState.RETRYING, "Serve did not answer"),
                 Sighting(2.0, 200, DataPlaneState.RETRYING, "Ray's head timed out"),
                 Sighting(3.0, 200, SERVING)]  # fmt: skip
    spans = judge(sightings, [sent(2.5, 200)]).spans
    assert [(s.label, s.first_s, s.last_s, s.reasons) for s in spans] == [
        ("retrying", 1.0, 2.0, ("Ray's head timed out", "Serve did not answer")),
        ("serving", 3.0, 3.0, ())]  # fmt: skip
    assert judge(sightings, []).said(DataPlaneState.RETRYING)
    assert not judge(sightings, []).said(FAILED)


states = st.sampled_from([None, *DataPlaneState])
times = st.floats(-5.0, 100.0, allow_nan=False)


@given(
    st.lists(st.tuples(times, states), max_size=20),
    st.lists(st.tuples(times, st.sampled_from([0, 200, 404, 503])), max_size=30),
)
def test_premature_only_counts_serving_sightings_and_never_when_every_request_served(
    raw_sightings: list[tuple[float, DataPlaneState | None]],
    raw_attempts: list[tuple[float, int]],
) -> None:
    sightings = [said(at, state, 0) for at, state in raw_sightings]
    attempts = [sent(at, status) for at, status in raw_attempts]
    verdict = judge(sightings, attempts)
    assert 0 <= verdict.premature <= sum(s.serving for s in sightings)
    assert verdict.failed_midway_s >= 0.0
    all_served = judge(sightings, [sent(a.sent_s, 200) for a in attempts])
    assert all_served.premature == 0
    assert verdict.before_200.total + verdict.after_200.total == sum(
        a.status != 200 for a in attempts
    )
