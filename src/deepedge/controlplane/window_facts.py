"""What a window's decisions read (:mod:`deepedge.controlplane.transitions`): the
deployment's evidence rules (:class:`Policy`, from its spec) and what the loop measured of
the window (:class:`WindowFacts`), with the served accuracy pooled over windows too slow
to tell a drift alone (:func:`pooled`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deepedge.controlplane.deployment_spec import (
    MIN_UPDATE_SAMPLES,
    DeploymentSpec,
    Labeller,
)
from deepedge.controlplane.evidence import Accuracy, PairedComparison, wilson
from deepedge.controlplane.records import ModelVersion, WindowPoint


@dataclass(frozen=True)
class Policy:
    """The deployment's evidence rules (its ``gate``, ``canary`` and ``trigger``)."""

    confidence: float
    min_samples: int
    tolerance: float
    min_gain: float
    canary_windows: int
    canary_max_windows: int
    threshold: float
    recovery_margin: float
    cooldown_windows: int
    sample_count: int | None
    period_windows: int | None
    validation_fraction: float
    recent_windows: int
    hard_share: float = 0.0  # of golden labels, for training only (windows count the rest)
    canary_during_recovery: bool = False  # a recovery's update shown better: a canary too

    @classmethod
    def of(cls, spec: DeploymentSpec) -> Policy:
        return cls(
            confidence=spec.gate.confidence, min_samples=spec.gate.min_samples,
            tolerance=spec.gate.rollback_tolerance, min_gain=spec.gate.min_gain,
            canary_windows=spec.canary.windows,
            canary_max_windows=max(spec.canary.windows, spec.canary.max_windows),
            threshold=spec.trigger.accuracy_threshold,
            recovery_margin=spec.trigger.recovery_margin,
            cooldown_windows=spec.trigger.cooldown_windows,
            sample_count=spec.trigger.sample_count, period_windows=spec.trigger.period_windows,
            validation_fraction=spec.update.validation_fraction,
            recent_windows=spec.update.recent_windows,
            hard_share=(0.0 if spec.labeller is Labeller.GROUND_TRUTH and spec.user_workload
                        is None else spec.update.hard_fraction),
            canary_during_recovery=spec.canary.during_recovery,
        )  # fmt: skip

    def samples_to_train(self) -> int:
        """Labelled samples an update needs: its minimum training set and, held out, the
        gate's minimum of evidence."""
        held_out = math.ceil(self.min_samples / self.validation_fraction)
        return max(MIN_UPDATE_SAMPLES + self.min_samples, held_out)


@dataclass(frozen=True)
class WindowFacts:
    """What the loop measured of window ``index`` (due at ``due_at``, scored at ``now``)."""

    index: int
    due_at: float
    now: float
    window_s: float
    versions: Mapping[int, ModelVersion]
    served: Accuracy | None  # the serving version's answers on its own share
    versus_previous: PairedComparison | None  # S against P on that share, this window
    canary_versus_serving: PairedComparison | None  # C against S on the canary's share
    history: Sequence[WindowPoint]  # earlier windows, oldest first
    samples: int  # labelled samples of the window
    severity: float
    canary_accuracy: float | None = None
    previous_accuracy: float | None = None
    last_undecided: str | None = None  # the kinds of the newest undecided event, if it was
    # said for the window before this one (so a streak is said once)
    kept: tuple[tuple[int, PairedComparison], ...] | None = None  # K against S, scored
    next_window_s: float | None = None  # the next window's length, when not ``window_s``
    # (after a window that ended early where its inputs moved: window_edges)
    trainable: int = 0  # every label of the window an update trains on: ``samples`` and the
    # answers chosen to teach (0: not counted, estimated from ``samples``)


MAX_POOLED_WINDOWS = 6  # a slow stream's drift is told over at most this many windows


def pooled(served: Accuracy | None, history: Sequence[WindowPoint], serving: int | None,
           policy: Policy, at_least: int | None = None) -> Accuracy | None:  # fmt: skip
    """The serving version's accuracy on this window, pooled with the windows before it
    that it served (newest first, at most ``MAX_POOLED_WINDOWS`` in all) while they hold
    fewer than ``at_least`` labelled samples (``min_samples``): a stream too slow to tell a
    drift in one window tells it over a few."""
    enough = policy.min_samples if at_least is None else at_least
    if served is None or served.n >= enough:
        return served
    n, right, used = served.n, served.right, 1
    for point in reversed(history):
        if n >= enough or used >= MAX_POOLED_WINDOWS:
            break
        if point.served_version != serving or point.accuracy is None or not point.samples:
            break
        n, right, used = n + point.samples, right + round(point.accuracy * point.samples), used + 1
    return Accuracy(n, right, *wilson(right, n, policy.confidence))
