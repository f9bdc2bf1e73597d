"""Drifting streams that follow a scene schedule, and the drift trace of the accuracy benchmark.

A *scene schedule* ``sigma_0, sigma_1, ...`` gives each window a scene value ``sigma`` in
[-1, 1]: severity ``|sigma|`` (contrast, brightness, blur, noise and class mix as in
:mod:`deepedge.learning.stream`) and rotation ``sigma * max_rotation`` (its sign turns the
rotation; ``DriftConfig.transform``). A window past the schedule's end keeps its last scene.

:class:`ScheduledStream` is the digits stream on such a schedule (the recorded Ekya traces'
streams, :mod:`deepedge.sim.recorded`, and the accuracy benchmark's camera).

:func:`drift_trace` is the accuracy benchmark's trace (:mod:`deepedge.bench.accuracy`):
``lead`` windows of the first condition (what the first version learns), then four segments
of ``n`` windows each:

0. **first**: scene 0, the first condition;
1. **abrupt**: scene +1 from its first window on;
2. **gradual**: from +1 to -1 over ``ramp`` windows, ``sigma_k = 1 - 2 min(k + 1, ramp) /
   ramp`` (window ``k`` of the segment; its severity passes through 0 half-way), then -1:
   a third condition, rotated the other way;
3. **recurring**: scene 0 again, the first segment's distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, Transform

SEGMENTS = ("first", "abrupt", "gradual", "recurring")


class ScheduledStream(DriftingStream):
    """A :class:`DriftingStream` whose severity and rotation sign follow a scene schedule."""

    def __init__(self, source: ImageSet, config: DriftConfig, scenes: Sequence[float]) -> None:
        super().__init__(source, config)
        if not scenes:
            raise InvalidInputError("a scene schedule needs at least one scene", field="scenes")
        self.scenes = tuple(float(s) for s in scenes)

    def _scene(self, t: int) -> float:
        return self.scenes[min(t, len(self.scenes) - 1)]

    def transform_at(self, t: int) -> Transform:
        return self.config.transform(self._scene(t))

    def class_mix_at(self, t: int) -> np.ndarray:
        n = self.n_classes
        first = np.arange(n) < n / 2
        p0 = 1.0 + self.config.class_skew * first
        p1 = 1.0 + self.config.class_skew * ~first
        s = abs(self._scene(t))
        mix = (1.0 - s) * p0 / p0.sum() + s * p1 / p1.sum()
        return np.asarray(mix / mix.sum())


@dataclass(frozen=True)
class DriftTrace:
    """The benchmark's trace (module docstring): ``scenes`` per stream window, the lead
    windows first; trace window ``w`` is stream window ``lead_windows + w``."""

    lead_windows: int
    segment_windows: int
    ramp_windows: int
    scenes: tuple[float, ...]

    @property
    def windows(self) -> int:
        """Trace windows (the lead windows not counted)."""
        return len(SEGMENTS) * self.segment_windows

    def segment_of(self, window: int) -> int:
        """The segment (index into :data:`SEGMENTS`) of trace window ``window``."""
        return min(len(SEGMENTS) - 1, window // self.segment_windows)

    def segment_start(self, segment: int) -> int:
        """The first trace window of ``segment``."""
        return segment * self.segment_windows

    def scene(self, window: int) -> float:
        """The scene of trace window ``window``."""
        return self.scenes[self.lead_windows + window]


def drift_trace(segment_windows: int, ramp_windows: int, lead_windows: int = 0) -> DriftTrace:
    """The four-segment trace of the module docstring."""
    if segment_windows < 1 or not 1 <= ramp_windows <= segment_windows or lead_windows < 0:
        raise InvalidInputError(
            "need segment_windows >= 1, 1 <= ramp_windows <= segment_windows and lead_windows >= 0",
            field="ramp_windows",
        )
    n, ramp = segment_windows, ramp_windows
    scenes = [0.0] * lead_windows
    scenes += [0.0] * n
    scenes += [1.0] * n
    scenes += [1.0 - 2.0 * min(k + 1, ramp) / ramp for k in range(n)]
    scenes += [0.0] * n
    return DriftTrace(lead_windows, n, ramp, tuple(scenes))
