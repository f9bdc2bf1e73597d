"""When to start a model update: accuracy threshold, schedule, or on request.

A pure policy (state in, decision out; no clock): after window ``t`` is served and a
sample of it labelled by the golden model, :func:`decide_trigger` fires when, in order,

1. an update was requested explicitly (``REQUEST``);
2. the golden-labelled accuracy of the served model on the window is below
   ``accuracy_threshold`` (``ACCURACY_DROP``), outside the ``cooldown_windows`` after the
   last update;
3. ``period_windows`` windows have passed since the last update (``SCHEDULE``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


class TriggerReason(enum.Enum):
    NONE = "none"
    REQUEST = "request"
    ACCURACY_DROP = "accuracy-drop"
    SCHEDULE = "schedule"


@dataclass(frozen=True)
class TriggerPolicy:
    accuracy_threshold: float = 0.85  # golden-labelled accuracy under which to update
    period_windows: int | None = None  # scheduled update every N windows (None: never)
    cooldown_windows: int = 0  # windows after an update in which a drop is ignored

    def __post_init__(self) -> None:
        if not 0.0 <= self.accuracy_threshold <= 1.0:
            raise InvalidInputError("accuracy_threshold must be in [0, 1]", field="threshold")
        if self.period_windows is not None and self.period_windows < 1:
            raise InvalidInputError("period_windows must be >= 1", field="period_windows")
        if self.cooldown_windows < 0:
            raise InvalidInputError("cooldown_windows must be >= 0", field="cooldown_windows")


@dataclass(frozen=True)
class TriggerInput:
    window: int
    golden_accuracy: float  # served model vs golden labels on the window's labelled sample
    last_update_window: int | None  # None: never updated
    requested: bool = False


@dataclass(frozen=True)
class TriggerDecision:
    fire: bool
    reason: TriggerReason


def decide_trigger(policy: TriggerPolicy, state: TriggerInput) -> TriggerDecision:
    """The decision for ``state`` under ``policy`` (rules of the module docstring)."""
    if state.requested:
        return TriggerDecision(True, TriggerReason.REQUEST)
    since = None if state.last_update_window is None else state.window - state.last_update_window
    cooling = since is not None and since <= policy.cooldown_windows
    if state.golden_accuracy < policy.accuracy_threshold and not cooling:
        return TriggerDecision(True, TriggerReason.ACCURACY_DROP)
    if policy.period_windows is not None:
        elapsed = state.window + 1 if since is None else since
        if elapsed >= policy.period_windows:
            return TriggerDecision(True, TriggerReason.SCHEDULE)
    return TriggerDecision(False, TriggerReason.NONE)
