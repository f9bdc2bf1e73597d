"""When to start a model update: the one trigger rule of the project.

A pure rule (facts in, kind out; no clock). After window ``t`` is served and a sample of it
golden-labelled, :func:`decide_trigger` names the first of, in order:

1. an update was requested explicitly (``REQUEST``);
2. the accuracy of the serving version is below ``accuracy_threshold`` (``ACCURACY_DROP``),
   outside the ``cooldown_windows`` after the last update; an accuracy of ``None`` (too few
   labelled samples to tell) never drops;
3. ``sample_count`` samples have been labelled since the last update (``SAMPLE_COUNT``);
4. ``period_windows`` windows have passed since the last update (``SCHEDULE``).

``FOLLOW_UP`` is the control plane's own (:func:`deepedge.controlplane.transitions.follow_up`):
the newest update was shown to help while the site is still below its level, so another
learns from the samples that came since.

The control plane (:mod:`deepedge.controlplane.transitions`) passes the upper end of the
served accuracy's interval and a threshold raised to the level before the drift, so a drop
is only called when the samples support it; the standalone loop of
:mod:`deepedge.runtime.training.loop` passes the point estimate.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


class TriggerKind(enum.StrEnum):
    NONE = "none"
    ACCURACY_DROP = "accuracy-drop"
    SCHEDULE = "schedule"
    SAMPLE_COUNT = "sample-count"
    REQUEST = "request"
    FOLLOW_UP = "follow-up"  # the last update helped and the site is not back yet


@dataclass(frozen=True)
class TriggerPolicy:
    accuracy_threshold: float = 0.85  # accuracy under which to update
    period_windows: int | None = None  # scheduled update every N windows (None: never)
    cooldown_windows: int = 0  # windows after an update in which a drop is ignored
    sample_count: int | None = None  # update after this many labelled samples (None: never)

    def __post_init__(self) -> None:
        if not 0.0 <= self.accuracy_threshold <= 1.0:
            raise InvalidInputError("accuracy_threshold must be in [0, 1]", field="threshold")
        if self.period_windows is not None and self.period_windows < 1:
            raise InvalidInputError("period_windows must be >= 1", field="period_windows")
        if self.cooldown_windows < 0:
            raise InvalidInputError("cooldown_windows must be >= 0", field="cooldown_windows")
        if self.sample_count is not None and self.sample_count < 1:
            raise InvalidInputError("sample_count must be >= 1", field="sample_count")


@dataclass(frozen=True)
class TriggerFacts:
    window: int
    accuracy: float | None  # the serving version on the window (None: too few samples)
    last_update_window: int | None  # None: never updated
    samples_since_update: int = 0
    requested: bool = False


def decide_trigger(policy: TriggerPolicy, facts: TriggerFacts) -> TriggerKind:
    """The kind of update ``facts`` call for under ``policy`` (rules of the module
    docstring); ``TriggerKind.NONE`` when none."""
    if facts.requested:
        return TriggerKind.REQUEST
    since = None if facts.last_update_window is None else facts.window - facts.last_update_window
    cooling = since is not None and since <= policy.cooldown_windows
    if facts.accuracy is not None and facts.accuracy < policy.accuracy_threshold and not cooling:
        return TriggerKind.ACCURACY_DROP
    if policy.sample_count is not None and facts.samples_since_update >= policy.sample_count:
        return TriggerKind.SAMPLE_COUNT
    if policy.period_windows is not None:
        elapsed = facts.window + 1 if since is None else since
        if elapsed >= policy.period_windows:
            return TriggerKind.SCHEDULE
    return TriggerKind.NONE
