"""Scene-scheduled streams and the accuracy benchmark's drift trace."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.learning.photo_stream import make_photo_stream, make_scheduled_photo_stream
from deepedge.learning.scheduled_stream import SEGMENTS, ScheduledStream, drift_trace
from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images


def test_the_trace_has_its_four_segments() -> None:
    trace = drift_trace(segment_windows=8, ramp_windows=4, lead_windows=2)
    assert trace.windows == 32 and len(trace.scenes) == 34
    assert trace.scenes[:2] == (0.0, 0.0)  # the lead: the first condition
    assert [trace.scene(w) for w in range(8)] == [0.0] * 8
    assert [trace.scene(w) for w in range(8, 16)] == [1.0] * 8
    assert [trace.scene(w) for w in range(16, 24)] == [0.5, 0.0, -0.5, -1.0, -1.0, -1.0,
                                                       -1.0, -1.0]  # fmt: skip
    assert [trace.scene(w) for w in range(24, 32)] == [0.0] * 8
    assert [trace.segment_of(w) for w in (0, 7, 8, 16, 31)] == [0, 0, 1, 2, 3]
    assert [trace.segment_start(k) for k in range(len(SEGMENTS))] == [0, 8, 16, 24]


@pytest.mark.parametrize(("segment", "ramp", "lead"), [(0, 1, 0), (4, 0, 0), (4, 5, 0), (4, 2, -1)])
def test_bad_traces_are_refused(segment: int, ramp: int, lead: int) -> None:
    with pytest.raises(InvalidInputError):
        drift_trace(segment, ramp, lead)


def test_the_first_condition_is_the_unscheduled_stream_s_base_windows() -> None:
    """The deployment's first version learns windows 0.. of its own (unscheduled) stream;
    the camera's scheduled stream must send the same distribution there: the same images."""
    digits = load_digits_images(16)
    config = DriftConfig(seed=3, window_size=50, eval_size=1)
    base = DriftingStream(digits, DriftConfig(seed=3, window_size=50, eval_size=1,
                                              onset_window=1000, ramp_windows=1))  # fmt: skip
    scheduled = ScheduledStream(digits, config, drift_trace(4, 2, lead_windows=2).scenes)
    for t in (0, 1, 2):
        assert np.array_equal(scheduled.window(t).images, base.window(t).images)
        assert np.array_equal(scheduled.window(t).labels, base.window(t).labels)
    drifted = scheduled.window(2 + 4)  # the abrupt segment's first window
    assert drifted.transform.severity == 1.0 and drifted.transform.rotation_deg > 0


def test_a_scheduled_photo_stream_follows_its_scenes() -> None:
    plain = make_photo_stream(window_size=16, eval_size=4)  # severity 0, 0, 0, 0.5, 1 ...
    scheduled = make_scheduled_photo_stream([0.0, 0.0, 0.0, 0.5, -1.0], window_size=16,
                                            eval_size=4)  # fmt: skip
    for t in (0, 3):
        assert np.array_equal(scheduled.window(t).images, plain.window(t).images)
    dusk, warm = plain.window(4), scheduled.window(4)  # scene +1 and -1
    assert np.array_equal(dusk.labels, warm.labels)
    blue_minus_red = lambda w: float(w.images[:, 2].mean() - w.images[:, 0].mean())  # noqa: E731
    assert blue_minus_red(dusk) > blue_minus_red(plain.window(0)) > blue_minus_red(warm)
    assert scheduled.window(9).meta == scheduled.window(4).meta  # past the end: the last scene
    with pytest.raises(InvalidInputError):
        make_scheduled_photo_stream([1.5])
