"""The steps that change which version serves, shared by the control loop's decisions
(:mod:`deepedge.controlplane.transitions`) and the operator's actions
(:mod:`deepedge.controlplane.rollout_actions`): promote, roll back, roll a canary back,
each with its event; :func:`checked` holds a step to the transition tables. A version's
evidence accumulates in its metrics as a paired table (``<prefix>_e/f/g/h``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepedge.controlplane.deployments import Step, VersionChange
from deepedge.controlplane.evidence import PairedComparison, paired_from_counts
from deepedge.controlplane.records import DeploymentRecord, Event, EventKind, ModelVersion
from deepedge.controlplane.rollout_status import (
    DeploymentStatus,
    VersionStatus,
    check_deployment_transition,
    check_version_transition,
)

D, V = DeploymentStatus, VersionStatus
SHADOW, CANARY_SHARE = "shadow", "canary"  # prefixes of a version's accumulated evidence
KEPT_SHARE = "kept"  # a kept version's census evidence over the windows that look like its data
KEPT_AGAINST, KEPT_WINDOW = "kept_against", "kept_window"  # which serving version, till when


def stored_evidence(
    version: ModelVersion | None, prefix: str, confidence: float
) -> PairedComparison:
    """The paired table accumulated in a version's metrics (empty when none)."""
    metrics = version.metrics if version is not None else {}
    e, f, g, h = (int(metrics.get(f"{prefix}_{k}", 0)) for k in "efgh")
    return paired_from_counts(e, f, g, h, confidence)


def evidence_metrics(comparison: PairedComparison, prefix: str) -> dict[str, float]:
    table = (comparison.both, comparison.a_only, comparison.b_only, comparison.neither)
    return {f"{prefix}_{k}": float(v) for k, v in zip("efgh", table, strict=True)}


def empty_evidence(prefix: str) -> dict[str, float]:
    return {f"{prefix}_{k}": 0.0 for k in "efgh"}


def promote(deployment: DeploymentRecord, number: int, changes: Sequence[VersionChange],
            events: Sequence[Event], how: str, window: int | None = None,
            detail: Mapping[str, Any] | None = None) -> Step:  # fmt: skip
    """``number`` serves; what served retires (its rollback evidence starts afresh)."""
    old = deployment.serving_version
    retire = (VersionChange(old, V.RETIRED),) if old is not None and old != number else ()
    return Step(
        deployment={"status": D.ACTIVE, "serving_version": number, "previous_version": old,
                    "canary_version": None, "canary_windows_done": 0, "current_job_id": None},
        versions=(*changes, *retire,
                  VersionChange(number, V.SERVING, replaced=old, metrics=empty_evidence(SHADOW))),
        events=(*events, Event(EventKind.PROMOTED, f"v{number} serves on every node {how}; "
                               f"v{old} retired", window=window, version=number,
                               detail=dict(detail or {}))),
    )  # fmt: skip


def roll_back(
    deployment: DeploymentRecord,
    bad: int,
    back_to: int,
    why: str,
    window: int | None = None,
    detail: Mapping[str, Any] | None = None,
) -> Step:
    """``back_to`` serves again in place of ``bad``; a canary is rolled back with it; an
    update being trained goes on (it is gated against what serves then)."""
    canary = deployment.canary_version
    cancel = (VersionChange(canary, V.ROLLED_BACK),) if canary not in (None, bad) else ()
    status = D.ACTIVE if deployment.status is D.CANARY else deployment.status
    return Step(
        deployment={"status": status, "serving_version": back_to, "previous_version": None,
                    "canary_version": None, "canary_windows_done": 0},
        versions=(*cancel, VersionChange(bad, V.ROLLED_BACK),
                  VersionChange(back_to, V.SERVING, metrics=empty_evidence(SHADOW))),
        events=(Event(EventKind.ROLLED_BACK, f"v{bad} rolled back to v{back_to}: {why}",
                      window=window, version=bad,
                      detail={"to_version": back_to, **(detail or {})}),),
    )  # fmt: skip


def roll_back_canary(deployment: DeploymentRecord, why: str, window: int | None = None,
                     detail: Mapping[str, Any] | None = None,
                     metrics: Mapping[str, float] | None = None) -> Step:  # fmt: skip
    canary = deployment.canary_version
    assert canary is not None
    return Step(
        deployment={"status": D.ACTIVE, "canary_version": None, "canary_windows_done": 0},
        versions=(VersionChange(canary, V.ROLLED_BACK, metrics=dict(metrics or {})),),
        events=(Event(EventKind.ROLLED_BACK, f"canary v{canary} rolled back: {why}",
                      window=window, version=canary, detail=dict(detail or {})),),
    )  # fmt: skip


def checked(
    step: Step, deployment: DeploymentRecord, statuses: Mapping[int, VersionStatus]
) -> Step:
    """``step`` if every change it makes is legal from the current statuses (the tables of
    :mod:`deepedge.controlplane.rollout_status`), else ``IllegalTransitionError``."""
    target = step.deployment.get("status")
    if isinstance(target, DeploymentStatus):
        check_deployment_transition(deployment.status, target)
    now = dict(statuses)
    for change in step.versions:
        if change.status is not None and change.status is not now.get(change.number):
            current = now.get(change.number)
            if current is not None:
                check_version_transition(current, change.status)
            now[change.number] = change.status
    return step
