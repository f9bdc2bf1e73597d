"""Deployment and model-version statuses: two enums, one transition table each.

Deployment (the control loop's state for one served model)::

                 update job submitted            candidate passed the gate
      ┌──────▶ ACTIVE ─────────────▶ UPDATING ──────────────────────▶ CANARY
      │          ▲  ▲                  │                                │
      │          │  └──────────────────┘ job failed, gate failed,      │ promoted, or
      │          │                       or promoted without a canary   │ rolled back
      │          └──────────────────────────────────────────────────────┘
      │    (a deployment is created UPDATING: its first version is being trained;
      │     CANARY ──▶ UPDATING: a drift overtook the canary, which is rolled back, and
      │     the drift's update starts in the same window)
    STOPPED ◀── from any state, by the user (kept for its history)

Model version (one trained model of one deployment, with its lineage)::

    TRAINING ──job completed──▶ CANDIDATE ──gate passed──▶ CANARY ──canary held──▶ SERVING
        │                          │  │                      │                     │  ▲
        └──▶ FAILED                │  └──no canary──────────────────────────────▶──┘  │
                                   ▼                         ▼                     ▼  │
                               REJECTED                 ROLLED_BACK ◀──────── (worse than
                                                                              the previous)
    SERVING ──superseded──▶ RETIRED ──manual rollback──▶ SERVING

    TRAINING, CANDIDATE, CANARY ──▶ CANCELLED (its deployment was stopped before a verdict,
                                    or its Ekya window's scheduler chose not to retrain)

``FAILED``, ``REJECTED``, ``ROLLED_BACK`` and ``CANCELLED`` are terminal.
"""

from __future__ import annotations

import enum

from deepedge.core.errors import IllegalTransitionError


class DeploymentStatus(enum.StrEnum):
    ACTIVE = "ACTIVE"
    UPDATING = "UPDATING"
    CANARY = "CANARY"
    STOPPED = "STOPPED"


class VersionStatus(enum.StrEnum):
    TRAINING = "TRAINING"
    CANDIDATE = "CANDIDATE"
    REJECTED = "REJECTED"
    CANARY = "CANARY"
    SERVING = "SERVING"
    RETIRED = "RETIRED"
    ROLLED_BACK = "ROLLED_BACK"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


D, V = DeploymentStatus, VersionStatus

DEPLOYMENT_TRANSITIONS: dict[DeploymentStatus, frozenset[DeploymentStatus]] = {
    D.ACTIVE: frozenset({D.UPDATING, D.CANARY, D.STOPPED}),
    D.UPDATING: frozenset({D.ACTIVE, D.CANARY, D.STOPPED}),
    D.CANARY: frozenset({D.ACTIVE, D.UPDATING, D.STOPPED}),
    D.STOPPED: frozenset(),
}

VERSION_TRANSITIONS: dict[VersionStatus, frozenset[VersionStatus]] = {
    V.TRAINING: frozenset({V.CANDIDATE, V.FAILED, V.CANCELLED}),
    V.CANDIDATE: frozenset({V.REJECTED, V.CANARY, V.SERVING, V.CANCELLED}),
    V.CANARY: frozenset({V.SERVING, V.ROLLED_BACK, V.CANCELLED}),
    V.SERVING: frozenset({V.RETIRED, V.ROLLED_BACK}),
    V.RETIRED: frozenset({V.SERVING}),
    V.REJECTED: frozenset(),
    V.ROLLED_BACK: frozenset(),
    V.FAILED: frozenset(),
    V.CANCELLED: frozenset(),
}

LIVE_VERSIONS: frozenset[VersionStatus] = frozenset({V.TRAINING, V.CANDIDATE, V.CANARY})
"""Versions still on their way to a verdict (at most one per deployment)."""


def check_deployment_transition(current: DeploymentStatus, target: DeploymentStatus) -> None:
    if target is not current and target not in DEPLOYMENT_TRANSITIONS[current]:
        allowed = ", ".join(sorted(DEPLOYMENT_TRANSITIONS[current])) or "none (terminal)"
        raise IllegalTransitionError(
            f"a {current} deployment cannot become {target}; allowed: {allowed}",
            current=str(current),
            target=str(target),
        )


def check_version_transition(current: VersionStatus, target: VersionStatus) -> None:
    if target not in VERSION_TRANSITIONS[current]:
        allowed = ", ".join(sorted(VERSION_TRANSITIONS[current])) or "none (terminal)"
        raise IllegalTransitionError(
            f"a {current} model version cannot become {target}; allowed: {allowed}",
            current=str(current),
            target=str(target),
        )
