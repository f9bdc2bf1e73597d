"""The deployment registry's store contract, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, Step, VersionChange
from deepedge.controlplane.records import Event, EventKind, TriggerKind, WindowPoint
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.core.errors import ConflictError, IllegalTransitionError, NotFoundError
from deepedge.service.store import JobStore


def test_create_is_idempotent_by_name_and_conflicts_on_another_spec(store: JobStore) -> None:
    registry = DeploymentStore(store)
    tenant = store.create_tenant("a", "tok-a")
    first, created = registry.create(tenant.id, DeploymentSpec(name="d"))
    again, created_again = registry.create(tenant.id, DeploymentSpec(name="d"))
    assert created and not created_again and again.id == first.id
    with pytest.raises(ConflictError):
        registry.create(tenant.id, DeploymentSpec.model_validate({"name": "d", "window_s": 9}))
    versions = registry.versions(first.id)
    assert [(v.number, v.status, v.parent) for v in versions] == [(1, VersionStatus.TRAINING, None)]
    assert [e.kind for e in registry.events(first.id)] == [EventKind.CREATED]


def test_deployments_are_tenant_scoped(store: JobStore) -> None:
    registry = DeploymentStore(store)
    alice, bob = store.create_tenant("a", "tok-a"), store.create_tenant("b", "tok-b")
    registry.create(alice.id, DeploymentSpec(name="d"))
    registry.create(bob.id, DeploymentSpec(name="d"))  # the same name in another tenant
    assert [d.name for d in registry.of_tenant(alice.id)] == ["d"]
    with pytest.raises(NotFoundError):
        registry.get(alice.id, "other")
    assert registry.get(alice.id, "d").id != registry.get(bob.id, "d").id


def test_commit_is_a_compare_and_set_with_checked_transitions(store: JobStore) -> None:
    registry = DeploymentStore(store)
    tenant = store.create_tenant("a", "tok-a")
    stale, _ = registry.create(tenant.id, DeploymentSpec(name="d"))
    registry.commit(
        stale,
        Step(deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
             versions=(VersionChange(1, VersionStatus.CANDIDATE),
                       VersionChange(1, VersionStatus.SERVING)),
             events=(Event(EventKind.PROMOTED, "v1 serves", version=1),)),
    )  # fmt: skip
    with pytest.raises(ConflictError):  # the second writer read the old row version
        registry.commit(stale, Step(deployment={"window": 3}))
    fresh = registry.get(tenant.id, "d")
    assert fresh.status is DeploymentStatus.ACTIVE and fresh.window == -1
    with pytest.raises(IllegalTransitionError):
        registry.commit(fresh, Step(versions=(VersionChange(1, VersionStatus.TRAINING),)))
    assert registry.get(tenant.id, "d").version == fresh.version  # nothing of it was kept
    assert [e.seq for e in registry.events(fresh.id)] == [0, 1]


def _serving_chain(registry: DeploymentStore, tenant_id: str) -> None:
    """v1 -> v2 -> v3, each promoted over the one before (v1 and v2 RETIRED)."""
    from deepedge.controlplane.deployments import NewVersion

    current = registry.get(tenant_id, "d")  # type: ignore[arg-type]
    registry.commit(current, Step(
        deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
    ))  # fmt: skip
    for number in (2, 3):
        current = registry.get(tenant_id, "d")  # type: ignore[arg-type]
        registry.commit(current, Step(
            deployment={"serving_version": number, "previous_version": number - 1},
            new_versions=(NewVersion(number, number - 1, (), "t", status=VersionStatus.CANDIDATE),),
            versions=(VersionChange(number - 1, VersionStatus.RETIRED),
                      VersionChange(number, VersionStatus.SERVING, replaced=number - 1)),
        ))  # fmt: skip


def test_manual_rollback_to_a_version_and_canary_cancel(store: JobStore) -> None:
    from deepedge.controlplane import rollout_actions

    registry = DeploymentStore(store)
    tenant = store.create_tenant("a", "tok-a")
    registry.create(tenant.id, DeploymentSpec(name="d"))
    _serving_chain(registry, tenant.id)
    back = rollout_actions.roll_back(registry, tenant.id, "d", to_version=1, reason="test")
    assert back.serving_version == 1 and back.previous_version is None
    statuses = {v.number: v.status for v in registry.versions(back.id)}
    assert statuses == {1: VersionStatus.SERVING, 2: VersionStatus.RETIRED,
                        3: VersionStatus.ROLLED_BACK}  # fmt: skip
    with pytest.raises(ConflictError, match="never served"):
        rollout_actions.roll_back(registry, tenant.id, "d", to_version=3)
    events = registry.events(back.id)
    assert events[-1].kind is EventKind.ROLLED_BACK and events[-1].detail["manual"] is True
    # A canary in progress is what a plain rollback cancels.
    from deepedge.controlplane.deployments import NewVersion

    current = registry.get(tenant.id, "d")
    registry.commit(current, Step(
        deployment={"status": DeploymentStatus.CANARY, "canary_version": 4},
        new_versions=(NewVersion(4, 1, (), "t", status=VersionStatus.CANDIDATE),),
        versions=(VersionChange(4, VersionStatus.CANARY),),
    ))  # fmt: skip
    cancelled = rollout_actions.roll_back(registry, tenant.id, "d")
    assert cancelled.status is DeploymentStatus.ACTIVE and cancelled.serving_version == 1
    assert registry.version(cancelled.id, 4).status is VersionStatus.ROLLED_BACK
    stopped = rollout_actions.stop(registry, tenant.id, "d")
    assert stopped.status is DeploymentStatus.STOPPED
    with pytest.raises(ConflictError):
        rollout_actions.request_update(registry, tenant.id, "d")


@pytest.mark.parametrize("revoked", [False, True])
def test_a_deployment_is_deleted_with_its_keys_and_samples(
    store: JobStore, tmp_path: Path, revoked: bool
) -> None:
    """Its keys (revoked or not) and its samples go with it; another deployment's stay."""
    import numpy as np

    from deepedge.controlplane import rollout_actions
    from deepedge.controlplane.inference_keys import InferenceKeyStore
    from deepedge.dataplane.routing import RouteKind
    from deepedge.dataplane.sample_store import (
        Retention,
        Sample,
        SampleStore,
        sample_store_path,
    )

    registry, keys = DeploymentStore(store), InferenceKeyStore(store)
    tenant = store.create_tenant("a", "tok-a")
    doomed, _ = registry.create(tenant.id, DeploymentSpec(name="d"))
    kept, _ = registry.create(tenant.id, DeploymentSpec(name="e"))
    made = [keys.create(doomed, name)[0] for name in ("cam-1", "cam-2")]
    if revoked:
        for key in made:
            keys.revoke(doomed, key.id)
    keys.create(kept, "cam")
    samples = SampleStore(sample_store_path(tmp_path))
    for record, n in ((doomed, 3), (kept, 2)):
        batch = [Sample(f"r{i}", float(i), 1, RouteKind.SERVING, 0, np.zeros(4, np.float32))
                 for i in range(n)]  # fmt: skip
        samples.append(record.id, batch, Retention(), now=10.0)

    gone = rollout_actions.delete(registry, tmp_path, tenant.id, "d", "d")

    assert (gone.deployment.id, gone.samples, gone.keys) == (doomed.id, 3, 2)
    assert [d.name for d in registry.of_tenant(tenant.id)] == ["e"]
    assert [g.deployment_id for g in keys.live_grants().values()] == [kept.id]
    assert samples.window(doomed.id, 0.0, 1e9) == [] and samples.deleted(doomed.id) == 3
    assert len(samples.window(kept.id, 0.0, 1e9)) == 2
    again, created = registry.create(tenant.id, DeploymentSpec(name="d"))
    assert created and again.id != doomed.id and keys.of_deployment(again) == []


def _scored(window: int, accuracy: float | None, samples: int) -> WindowPoint:
    return WindowPoint(
        window=window, at=100.0 + window, due_at=100.0 + window, served_version=1,
        accuracy=accuracy, canary_version=None, canary_accuracy=None, previous_version=None,
        previous_accuracy=None, samples=samples, trigger=TriggerKind.NONE, severity=0.0,
    )  # fmt: skip


def test_last_scored_is_each_deployments_newest_window_with_samples(store: JobStore) -> None:
    registry = DeploymentStore(store)
    tenant = store.create_tenant("a", "tok-a")
    quiet, _ = registry.create(tenant.id, DeploymentSpec(name="quiet"))
    busy, _ = registry.create(tenant.id, DeploymentSpec(name="busy"))
    never, _ = registry.create(tenant.id, DeploymentSpec(name="never"))
    windows = {
        quiet.id: [_scored(0, 0.9, 50), _scored(1, 0.8, 50), _scored(2, None, 0)],
        busy.id: [_scored(0, 0.7, 50), _scored(1, 0.75, 50)],
        never.id: [_scored(0, None, 0)],
    }
    for deployment_id, points in windows.items():
        for point in points:
            record = registry.get_by_id(deployment_id)
            registry.commit(record, Step(deployment={"window": point.window}, window=point))
    scored = registry.last_scored([quiet.id, busy.id, never.id])
    assert {d: (p.window, p.accuracy) for d, p in scored.items()} == {
        quiet.id: (1, 0.8), busy.id: (1, 0.75)}  # fmt: skip
    assert registry.last_scored([busy.id]).keys() == {busy.id}
    assert registry.last_scored([]) == {}
