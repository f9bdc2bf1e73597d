"""Pruning of retraining configurations far from the accuracy/cost Pareto front (Ekya 4.2-4.3).

After each window whose outcomes (measured, or the micro-profiler's estimates) are known,
every configuration ``c`` records its distance to the Pareto front of that window::

    gap(c) = max(0, max{ acc(p) : cost(p) <= cost(c) } - acc(c))

(the best accuracy any configuration reaches at no higher cost, minus its own). A
configuration whose mean gap over at least ``min_windows`` windows exceeds ``max_gap`` is
not offered again: it is neither profiled nor given to the scheduler, which shortens the
list ``Gamma`` of Algorithm 1 and keeps persistently dominated configurations out of the
argmax over noisy estimates. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar


class _Named(Protocol):
    @property
    def name(self) -> str: ...


NamedT = TypeVar("NamedT", bound=_Named)


@dataclass(frozen=True)
class Outcome:
    """A configuration's accuracy and cost in one window (measured or estimated)."""

    name: str
    accuracy: float
    gpu_seconds: float


def pareto_gaps(outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Per config: best accuracy among configs costing no more, minus its own (>= 0)."""
    gaps: dict[str, float] = {}
    for o in outcomes:
        best = max(p.accuracy for p in outcomes if p.gpu_seconds <= o.gpu_seconds)
        gaps[o.name] = max(0.0, best - o.accuracy)
    return gaps


@dataclass
class ConfigHistory:
    """Distances to the Pareto front over past windows; prunes the persistent laggards."""

    max_gap: float = 0.05
    min_windows: int = 2
    gaps: dict[str, list[float]] = field(default_factory=dict)

    def record(self, outcomes: Sequence[Outcome]) -> None:
        for name, gap in pareto_gaps(outcomes).items():
            self.gaps.setdefault(name, []).append(gap)

    def keep(self, configs: Sequence[NamedT]) -> list[NamedT]:
        """Configs to profile next: unknown ones, and those near the front on average."""
        kept = []
        for c in configs:
            seen = self.gaps.get(c.name, [])
            if len(seen) < self.min_windows or sum(seen) / len(seen) <= self.max_gap:
                kept.append(c)
        return kept or list(configs)
