"""Which replica groups the camera router tries first: a group that did not answer is
suspect, and a suspect group is probed, not forgotten.

A group that failed a request (no answer within the router's timeout, or an error: its
node lost, its replica restarting) is tried last by the requests that follow, for up to
``SUSPECT_S``. Once every ``PROBE_S`` one request still tries it in its place (a half-open
circuit breaker): one answer clears the suspicion, so a group that was only slow for a
moment (a loaded node) gets its cameras back within about a second instead of losing them
for the whole ``SUSPECT_S``, while a lost group costs at most one request's wait a second.
Pure; the router (:mod:`deepedge.runtime.serving.camera_router`) calls it on its event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SUSPECT_S = 10.0  # a group that failed is tried last for up to this long ...
PROBE_S = 1.0  # ... except by one request this often, which tries it in its place


@dataclass
class GroupHealth:
    """The suspicion of each group (module docstring); times are monotonic seconds."""

    suspect_s: float = SUSPECT_S
    probe_s: float = PROBE_S
    _until: dict[str, float] = field(default_factory=dict)  # group -> suspect until
    _probe_at: dict[str, float] = field(default_factory=dict)  # group -> next probe

    def order(self, groups: Sequence[str], now: float) -> list[str]:
        """``groups`` (the routed one first, then its fallbacks) as this request tries them:
        each suspect group moved last unless it is due a probe (that probe is this one)."""
        healthy, suspect = [], []
        for name in groups:
            if self._until.get(name, 0.0) <= now:
                healthy.append(name)
            elif self._probe_at.get(name, 0.0) <= now:
                self._probe_at[name] = now + self.probe_s
                healthy.append(name)
            else:
                suspect.append(name)
        return healthy + suspect

    def failed(self, group: str, now: float) -> None:
        self._until[group] = now + self.suspect_s
        self._probe_at[group] = now + self.probe_s

    def answered(self, group: str) -> None:
        self._until.pop(group, None)
        self._probe_at.pop(group, None)

    def suspect(self, now: float) -> set[str]:
        return {name for name, until in self._until.items() if until > now}
