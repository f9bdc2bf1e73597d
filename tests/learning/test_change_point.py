"""Where a window's inputs changed, told from the inputs alone (no model, no label)."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.learning.change_point import MIN_NEW, moved_at, moved_whole, split
from deepedge.learning.scheduled_stream import ScheduledStream, drift_trace
from deepedge.learning.stream import DriftConfig, load_digits_images

LEAD = 2
TRACE = drift_trace(24, 6, LEAD)


@pytest.fixture(scope="module")
def stream() -> ScheduledStream:
    return ScheduledStream(load_digits_images(16), DriftConfig(seed=3, window_size=150),
                           TRACE.scenes)  # fmt: skip


def images(stream: ScheduledStream, window: int) -> np.ndarray:
    return stream.window(LEAD + window).images


def test_windows_of_one_condition_never_move(stream: ScheduledStream) -> None:
    for w in range(0, 22):  # the first condition: windows differ by the class mix's luck
        assert moved_at(images(stream, w), images(stream, w + 1)[:90]) is None
    for w in range(24, 46):  # the abrupt drift's condition
        assert moved_at(images(stream, w), images(stream, w + 1)[:90]) is None
    for w in [*range(0, 22), *range(24, 46)]:  # nor is one told new whole
        assert not moved_whole(images(stream, w), images(stream, w + 1)[:90])


@pytest.mark.parametrize(("old", "new"), [(MIN_NEW, 2 * MIN_NEW), (60, MIN_NEW), (100, 40)])
@pytest.mark.parametrize(("before", "after"), [(22, 24), (70, 72)])  # abrupt; recurring
def test_a_change_is_placed_at_its_first_input(
    stream: ScheduledStream, old: int, new: int, before: int, after: int
) -> None:
    window = np.concatenate([images(stream, before)[:old], images(stream, after)[:new]])
    assert moved_at(images(stream, before - 1), window) == old


def test_a_window_new_from_its_start_ends_on_time(stream: ScheduledStream) -> None:
    """The change came before the window began: nothing to split."""
    assert moved_at(images(stream, 22), images(stream, 24)[:80]) is None


@pytest.mark.parametrize(("before", "after"), [(22, 24), (70, 72)])  # abrupt; recurring
def test_a_window_new_from_its_start_is_told_whole(
    stream: ScheduledStream, before: int, after: int
) -> None:
    assert moved_whole(images(stream, before), images(stream, after)[:40])
    assert not moved_whole(images(stream, before), images(stream, before + 1)[:80])
    half = np.concatenate([images(stream, before + 1)[:40], images(stream, after)[:40]])
    assert not moved_whole(images(stream, before), half)  # new from its middle: moved_at's
    assert not moved_whole(images(stream, before), images(stream, after)[: 2 * MIN_NEW - 1])


def test_too_few_inputs_tell_nothing(stream: ScheduledStream) -> None:
    window = np.concatenate([images(stream, 22)[:20], images(stream, 24)[:10]])
    assert moved_at(images(stream, 21), window) is None  # fewer than 2 x MIN_NEW in all
    assert moved_at(images(stream, 21)[: MIN_NEW - 1], images(stream, 24)[:60]) is None


def test_feature_vectors_and_non_finite_inputs() -> None:
    rng = np.random.default_rng(0)
    before = rng.normal(0.0, 1.0, (100, 5))
    window = np.concatenate([rng.normal(0.0, 1.0, (40, 5)), rng.normal(3.0, 1.0, (30, 5))])
    window[3, 0] = np.nan
    assert moved_at(before, window) == 40
    assert moved_at(before, rng.normal(0.0, 1.0, (70, 5))) is None


def test_the_split_leaves_the_least_squared_error() -> None:
    scores = np.array([0.0, 0.1, -0.1, 0.0, 5.0, 5.1, 4.9, 5.0])
    assert split(scores, 2) == 4
    assert split(scores, 4) == 4
