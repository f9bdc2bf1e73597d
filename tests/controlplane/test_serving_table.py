"""What the data plane is told to serve, read from the store: only exported versions, the
canary with its share, the version a rollback restores, live keys only."""

from __future__ import annotations

from pathlib import Path

from deepedge.controlplane.artifacts import artifact_path, served_path, write_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
from deepedge.controlplane.inference_keys import InferenceKeyStore
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.serving import TableSource, serving_table
from deepedge.controlplane.site import Site
from deepedge.dataplane.keys import key_digest
from deepedge.learning.models import make_edge_model
from deepedge.service.store import JobStore

SPEC = {"name": "cam", "labeller": "ground-truth", "window_s": 60, "base_epochs": 1,
        "canary": {"fraction": 0.2}, "serving": {"replicas": 2, "cpus": 0.5,
        "sample_fraction": 0.3, "retention": {"max_samples": 500}}}  # fmt: skip


def test_the_table_follows_the_store(tmp_path: Path, sqlite_store: JobStore) -> None:
    store, data = sqlite_store, tmp_path / "data"
    tenant = store.create_tenant("acme", "tok", max_cores=8)
    registry = DeploymentStore(store)
    spec = DeploymentSpec.model_validate(SPEC)
    deployment, _ = registry.create(tenant.id, spec, now=0.0)
    assert serving_table(store, data).routes == {}  # nothing serves yet
    site = Site(data)
    for n in (1, 2):  # (untrained weights: the table does not care how good they are)
        model = make_edge_model(10, 16, 8, seed=n)
        write_version(artifact_path(data, deployment, n), model)
    site.export(deployment, artifact_path(data, deployment, 1))  # v2 is not exported (yet)
    registry.commit(registry.get_by_id(deployment.id), Step(
        deployment={"status": DeploymentStatus.CANARY, "serving_version": 1,
                    "canary_version": 2},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
        new_versions=(NewVersion(2, 1, (0,), "c", status=VersionStatus.CANDIDATE),),
    ))  # fmt: skip
    keys = InferenceKeyStore(store)
    live, secret = keys.create(registry.get_by_id(deployment.id), "a")
    gone, gone_secret = keys.create(registry.get_by_id(deployment.id), "b")
    keys.revoke(registry.get_by_id(deployment.id), gone.id)

    table = serving_table(store, data)
    route = table.routes["acme.cam"]
    assert route.versions.serving == 1 and route.versions.canary is None  # v2 not servable
    assert route.versions.canary_share == 0.0 and set(route.artifacts) == {1}
    assert route.signature.inputs[0].shape == (-1, 1, 16, 16) and route.classes == 10
    assert route.shape.replicas == 2 and route.shape.cpus == 0.5
    assert route.sample_fraction == 0.3 and route.retention.max_samples == 500
    assert set(table.keys) == {key_digest(secret)}  # the revoked key is out
    assert table.keys[key_digest(secret)].deployment_id == deployment.id
    assert key_digest(gone_secret) not in table.keys and live.revoked_at is None

    site.export(deployment, artifact_path(data, deployment, 2))
    again = TableSource(store.url, str(data))()
    assert again.revision != table.revision
    route = again.routes["acme.cam"]
    assert (route.versions.canary, route.versions.canary_share) == (2, 0.2)
    assert route.digests[2] and served_path(artifact_path(data, deployment, 2)).exists()
    assert TableSource(store.url, str(data))().revision == again.revision  # stable

    registry.commit(registry.get_by_id(deployment.id),
                    Step(deployment={"status": DeploymentStatus.STOPPED}))  # fmt: skip
    assert serving_table(store, data).routes == {}  # a stopped deployment is not served
