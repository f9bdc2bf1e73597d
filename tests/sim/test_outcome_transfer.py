"""The gap-closing carry-over of recorded retraining outcomes to another starting model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.sim.outcome_transfer import transfer_row, transferred_accuracy
from deepedge.sim.trace import TraceRetraining, TraceStreamWindow

acc = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(after=acc, start=acc, extra=acc, current=acc)
def test_the_recorded_start_gives_back_the_recorded_outcome(
    after: float, start: float, extra: float, current: float
) -> None:
    ceiling = max(after, start) + (1.0 - max(after, start)) * extra  # ceiling >= after
    assert transferred_accuracy(after, start, ceiling, start) == pytest.approx(after, abs=1e-9)
    assert 0.0 <= transferred_accuracy(after, start, ceiling, current) <= 1.0


@given(after=acc, start=acc, low=acc, high=acc)
def test_a_better_start_never_ends_worse(
    after: float, start: float, low: float, high: float
) -> None:
    ceiling = max(after, start)
    low, high = min(low, high), max(low, high)
    assert (
        transferred_accuracy(after, start, ceiling, low)
        <= transferred_accuracy(after, start, ceiling, high) + 1e-12
    )


@pytest.mark.parametrize(
    ("after", "start", "ceiling", "current", "expected"),
    [
        (0.6, 0.2, 1.0, 0.2, 0.6),  # the recorded pair itself
        (0.6, 0.2, 1.0, 0.6, 0.8),  # closes half the gap from a better start
        (0.6, 0.2, 1.0, 0.0, 0.5),  # and from a worse one
        (0.9, 0.8, 0.9, 0.1, 0.9),  # reaches the ceiling from its start: from any start
        (0.5, 0.6, 0.9, 0.8, 0.7),  # a retraining that hurt keeps its measured loss
        (0.95, 0.95, 0.95, 0.4, 0.4),  # start at the ceiling: the measured change (none)
    ],
)
def test_known_answers(
    after: float, start: float, ceiling: float, current: float, expected: float
) -> None:
    assert transferred_accuracy(after, start, ceiling, current) == pytest.approx(expected)


def _row(with_start: bool) -> TraceStreamWindow:
    return TraceStreamWindow(
        stream_id="s",
        retraining=[
            TraceRetraining(
                name="cheap",
                accuracy_after=0.5,
                gpu_seconds=1.0,
                estimated_accuracy_after=0.55,
                start_accuracy=0.3 if with_start else None,
            ),
            TraceRetraining(
                name="dear",
                accuracy_after=0.9,
                gpu_seconds=9.0,
                estimated_accuracy_after=0.85,
                start_accuracy=0.7 if with_start else None,
            ),
        ],
    )


def test_transfer_row_moves_truth_and_estimate_and_keeps_costs() -> None:
    row = transfer_row(_row(True), 0.1)
    cheap, dear = row.retraining
    # cheap closes (0.5-0.3)/(0.9-0.3) = 1/3 of the gap: 0.1 + 0.8/3
    assert cheap.accuracy_after == pytest.approx(0.1 + 0.8 / 3, abs=1e-6)
    # its estimate closes (0.55-0.3)/(0.85-0.3) of the estimates' gap to 0.85
    assert cheap.estimated_accuracy_after == pytest.approx(0.1 + 0.75 * 0.25 / 0.55, abs=1e-6)
    assert dear.accuracy_after == pytest.approx(0.9)  # it reached the ceiling from 0.7
    assert (cheap.gpu_seconds, dear.gpu_seconds) == (1.0, 9.0)


def test_rows_without_a_start_are_absolute_and_left_alone() -> None:
    row = _row(False)
    assert transfer_row(row, 0.1) == row
