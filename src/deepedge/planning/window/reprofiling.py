"""Re-profiling: averaging independent micro-profiles of the configurations a scheduler may pick.

The micro-profiler's estimate ``e_c`` of configuration ``c``'s accuracy after retraining is
noisy: it extrapolates a curve measured on a small validation split (tens to hundreds of
images) after a few profiling epochs on a sample of the data. A scheduler that picks the
configuration with the best estimate picks, among near-equals, the one whose noise came out
highest (the retrainings the horizon thief ran on the recorded trace came out 3-4 points
below their estimates). A further profile of ``c`` from the same deployed model, on its own
validation split and profiling samples, is another draw ``e_c^(j)``; their mean::

    e_c' = (1 / n) sum_{j=1..n} e_c^(j)

has variance ``s^2 (1 + (n - 1) r) / n`` for estimates of variance ``s^2`` whose errors
correlate by ``r`` (the part of the error they share: the curve model's bias, the noise of
the measured outcome itself), so it never raises the noise and lowers it by up to ``1 / n``.

Profiling every configuration ``n`` times costs ``n`` times the profiling. Only the
*candidates* are re-profiled: per stream and window the ``top_k`` configurations of highest
first estimate (``top_k`` None: all of them), since a configuration far below the best
estimate is not picked whatever its second draw says, and the winner's curse is among the
leaders. A candidate's estimate is then the mean of its first ``n`` profiles; the others keep
their first estimate.

The rule is pure (no I/O, no clock); the simulator (:func:`deepedge.sim.simulator.simulate`,
``reprofile=``) applies it to the profiles a recorded trace holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


@dataclass(frozen=True)
class ReprofileSpec:
    """``profiles`` = n >= 2 profiles averaged per candidate; ``top_k`` candidates per stream
    and window (None: every configuration)."""

    profiles: int
    top_k: int | None = None

    def __post_init__(self) -> None:
        if self.profiles < 2:
            raise InvalidInputError(f"profiles {self.profiles} < 2", field="profiles")
        if self.top_k is not None and self.top_k < 1:
            raise InvalidInputError(f"top_k {self.top_k} < 1", field="top_k")

    @property
    def label(self) -> str:
        which = "all" if self.top_k is None else f"top {self.top_k}"
        return f"{self.profiles} profiles, {which}"


def candidates(first: Mapping[str, float], top_k: int | None) -> set[str]:
    """The ``top_k`` names of highest first estimate (ties: the earlier name in sort order)."""
    ranked = sorted(first, key=lambda name: (-first[name], name))
    return set(ranked if top_k is None else ranked[:top_k])


def reprofiled_estimates(
    profiles: Mapping[str, Sequence[float]], spec: ReprofileSpec
) -> dict[str, float]:
    """Every configuration's estimate: the mean of its first ``spec.profiles`` profiles for a
    candidate (fewer if fewer were made), its first profile otherwise. ``profiles[name][0]``
    is the first estimate; every configuration needs one."""
    for name, values in profiles.items():
        if not values:
            raise InvalidInputError(f"configuration {name!r} has no profile", field="profiles")
    chosen = candidates({name: values[0] for name, values in profiles.items()}, spec.top_k)
    out: dict[str, float] = {}
    for name, values in profiles.items():
        used = values[: spec.profiles] if name in chosen else values[:1]
        out[name] = sum(used) / len(used)
    return out
