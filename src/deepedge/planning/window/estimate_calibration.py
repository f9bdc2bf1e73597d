"""EstimateCalibration: correcting the micro-profiler's accuracy estimates from past windows.

The scheduler plans on the micro-profiler's estimate ``e`` of the accuracy a retraining
configuration reaches. Once a retraining has finished, the system measures (with golden
labels) the accuracy ``y`` the retrained model actually reached, so after every window the
residuals ``y - e`` of the retrainings that ran are known. If the profiler is biased for a
stream (or for a family of configurations), those residuals predict the next window's
error. The calibration adds the shrunk mean residual of the observations in its scope::

    e' = clip(e + S / (n + k), 0, 1)

where ``S`` is the sum and ``n`` the number of past residuals in the scope, and ``k``
(``shrinkage``, pseudo-observations of residual 0) pulls a correction built on few windows
towards no correction (``k = 0``: the plain mean). Scopes (:class:`CalibrationScope`): one
pool for everything, one per stream, or one per stream and configuration family (a
configuration's name up to its first ``-``, e.g. ``e3`` of ``e3-f30-z1``: the epoch count of
the recorded trace's grid; a name without ``-`` is its own family).

Only *past* windows count: :meth:`EstimateCalibration.observe` queues a residual and
:meth:`EstimateCalibration.close_window` makes the queued ones visible, so nothing measured
in the window being planned can change that window's estimates. The component is pure (no
I/O, no clock); the simulator (:func:`deepedge.sim.simulator.simulate`, ``calibration=``)
drives it with the outcomes of the retrainings that completed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from deepedge.core.errors import InvalidInputError


class CalibrationScope(enum.Enum):
    """Which past residuals correct an estimate."""

    POOLED = "pooled"  # every stream, every configuration
    STREAM = "stream"  # the same stream, every configuration
    FAMILY = "family"  # the same stream and configuration family


@dataclass(frozen=True)
class CalibrationSpec:
    """Parameters of an :class:`EstimateCalibration`."""

    scope: CalibrationScope = CalibrationScope.STREAM
    shrinkage: float = 4.0

    def __post_init__(self) -> None:
        if not self.shrinkage >= 0.0:
            raise InvalidInputError(
                f"shrinkage must be >= 0, got {self.shrinkage}", field="shrinkage"
            )

    @property
    def label(self) -> str:
        return f"{self.scope.value}, k={self.shrinkage:g}"


def config_family(name: str) -> str:
    """The family of a configuration name: its text up to the first ``-``."""
    return name.split("-", 1)[0]


@dataclass
class _Pool:
    total: float = 0.0
    count: int = 0


@dataclass
class EstimateCalibration:
    """Online bias correction of accuracy estimates (module docstring)."""

    spec: CalibrationSpec = field(default_factory=CalibrationSpec)
    _pools: dict[tuple[str, str], _Pool] = field(default_factory=dict)
    _pending: list[tuple[tuple[str, str], float]] = field(default_factory=list)

    def _key(self, stream_id: str, config: str) -> tuple[str, str]:
        if self.spec.scope is CalibrationScope.POOLED:
            return ("", "")
        if self.spec.scope is CalibrationScope.STREAM:
            return (stream_id, "")
        return (stream_id, config_family(config))

    def observe(self, stream_id: str, config: str, estimate: float, measured: float) -> None:
        """Queue the residual of a retraining that finished; visible after
        :meth:`close_window`."""
        self._pending.append((self._key(stream_id, config), measured - estimate))

    def close_window(self) -> None:
        """The window ends: its queued residuals become history."""
        for key, residual in self._pending:
            pool = self._pools.setdefault(key, _Pool())
            pool.total += residual
            pool.count += 1
        self._pending.clear()

    def correction(self, stream_id: str, config: str) -> float:
        """The shrunk mean past residual added to an estimate (0 without history)."""
        pool = self._pools.get(self._key(stream_id, config))
        if pool is None or pool.count == 0:
            return 0.0
        return pool.total / (pool.count + self.spec.shrinkage)

    def corrected(self, stream_id: str, config: str, estimate: float) -> float:
        """``estimate`` plus the correction, clipped to [0, 1]."""
        return min(1.0, max(0.0, estimate + self.correction(stream_id, config)))

    def observations(self) -> int:
        """Residuals in the history (queued ones excluded)."""
        return sum(p.count for p in self._pools.values())
