"""Which version answers a request: the router's policy, per request and pure.

A deployment serves one version to everyone, or, during a canary, a second version to a
configured share of the requests, chosen per request by an independent draw (so the canary
and the serving version see the same mix of cameras and moments, and their accuracies on
their shares compare fairly). A client may pin a version by its URL
(``/versions/{v}/infer``); a pinned request is answered by that version if it is loaded and
is never counted in either share.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deepedge.core.errors import NotFoundError


class RouteKind(enum.StrEnum):
    SERVING = "serving"  # the version that serves everyone
    CANARY = "canary"  # the canary version, on its share of the requests
    PINNED = "pinned"  # a version the client named in the URL


@dataclass(frozen=True)
class Versions:
    """The versions a deployment serves now (numbers; the replica holds their models)."""

    serving: int
    canary: int | None = None
    canary_share: float = 0.0
    previous: int | None = None  # the version a rollback would restore, kept loaded

    def loaded(self) -> tuple[int, ...]:
        numbers = [self.serving, self.canary, self.previous]
        return tuple(sorted({n for n in numbers if n is not None}))


def choose(versions: Versions, draw: float, pinned: int | None = None) -> tuple[int, RouteKind]:
    """The version that answers a request and how it was chosen; ``draw`` is the request's
    own uniform number in [0, 1). Raises :class:`NotFoundError` for a pinned version that
    is not being served."""
    if pinned is not None:
        if pinned not in versions.loaded():
            served = ", ".join(f"v{n}" for n in versions.loaded())
            raise NotFoundError(f"version {pinned} is not being served (serving {served})")
        return pinned, RouteKind.PINNED
    if versions.canary is not None and draw < versions.canary_share:
        return versions.canary, RouteKind.CANARY
    return versions.serving, RouteKind.SERVING
