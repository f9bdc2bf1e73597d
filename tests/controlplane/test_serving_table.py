"""What the data plane is told to serve, read from the store: only exported versions, the
canary with its share, the version a rollback restores, live keys only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepedge.controlplane.artifacts import artifact_path, served_path, write_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
from deepedge.controlplane.inference_keys import InferenceKeyStore
from deepedge.controlplane.records import Event, EventKind
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.serving import TableSource, serving_table
from deepedge.controlplane.site import Site
from deepedge.dataplane.keys import key_digest
from deepedge.dataplane.serving_table import InferenceShare, ModelRoute
from deepedge.learning.models import make_edge_model
from deepedge.planning.placement import plan_placement
from deepedge.planning.placement.model import PlacementProblem
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


def _served(store: JobStore, data: Path, spec: DeploymentSpec, events: tuple[Event, ...]
            ) -> ModelRoute:  # fmt: skip
    """The route of a deployment of ``spec`` serving v1, after ``events``."""
    tenant = store.create_tenant(f"t{spec.name}", f"tok-{spec.name}", max_cores=8, max_gpus=2)
    registry = DeploymentStore(store)
    deployment, _ = registry.create(tenant.id, spec, now=0.0)
    write_version(artifact_path(data, deployment, 1), make_edge_model(10, 16, 8, seed=1))
    Site(data).export(deployment, artifact_path(data, deployment, 1))
    registry.commit(registry.get_by_id(deployment.id), Step(
        deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
        events=events,
    ))  # fmt: skip
    return serving_table(store, data).routes[f"t{spec.name}.{spec.name}"]


def test_a_decided_placement_is_served_as_replica_groups_routing_each_camera(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    problem = json.loads((Path(__file__).resolve().parents[2] / "examples/placement-tiny.json")
                         .read_text())  # fmt: skip
    solution = plan_placement(PlacementProblem.model_validate(problem), "heuristic", 5.0)
    decided = Event(EventKind.PLACEMENT, "decided", detail={
        "state": "decided", "method": "heuristic", "status": solution.status.value,
        "placements": [p.model_dump() for p in solution.placements],
        "routes": [r.model_dump() for r in solution.routes]})  # fmt: skip
    spec = DeploymentSpec.model_validate({**SPEC, "name": "detector", "placement": problem})
    route = _served(sqlite_store, tmp_path / "data", spec, (decided,))
    assert route.groups is not None and route.groups.model == "detector"
    wanted = {(p.variant, p.node, p.instances) for p in solution.placements
              if p.model == "detector"}  # fmt: skip
    assert {(g.variant, g.node, g.replicas) for g in route.groups.groups} == wanted
    assert route.groups.camera_table() == {
        r.source: f"{r.variant}@{r.node}" for r in solution.routes if r.model == "detector"
    }
    other = DeploymentSpec.model_validate({**SPEC, "name": "other", "placement": problem})
    assert _served(sqlite_store, tmp_path / "data", other, (decided,)).groups is None  # not in it
    submitted = Event(EventKind.PLACEMENT, "submitted", detail={"state": "submitted"})
    waiting = DeploymentSpec.model_validate({**SPEC, "name": "classifier", "placement": problem})
    assert _served(sqlite_store, tmp_path / "data", waiting, (submitted,)).groups is None


@pytest.mark.parametrize(("serving_gpus", "share", "replicas", "threads", "gpus"), [
    (0.0, 2.6, 1, 3, 0.0),  # a CPU server: the share is CPU threads, applied live
    (0.0, 0.3, 1, 1, 0.0),  # at least one thread
    (0.5, 0.3, 1, 1, 0.3),  # a GPU server: the share is each replica's GPU fraction
    (0.0, 4.2, 2, 2, 0.0),  # two replicas on a CPU server: 2.1 cores each
    (0.5, 0.6, 2, 1, 0.3),  # ... on a GPU: 0.3 of it each, the stream's share in all
])  # fmt: skip
def test_ekyas_newest_share_is_the_streams_replica_shape(
    tmp_path: Path, sqlite_store: JobStore, serving_gpus: float, share: float, replicas: int,
    threads: int, gpus: float,
) -> None:  # fmt: skip
    spec = DeploymentSpec.model_validate({
        **SPEC, "name": "edge", "target": {"kind": "edge-server", "gpus": 8},
        "update": {"policy": "ekya-window"},
        "serving": {**SPEC["serving"], "gpus": serving_gpus, "replicas": replicas}})  # fmt: skip
    streams = [{"stream_id": "edge", "inference_gpus": share},
               {"stream_id": "else", "inference_gpus": 1.0}]  # fmt: skip
    old = Event(EventKind.ALLOCATION, "w1", window=1, detail={
        "policy": "ekya-window", "server": "edge-1", "streams": [
            {"stream_id": "edge", "inference_gpus": 3.9}]})  # fmt: skip
    new = Event(EventKind.ALLOCATION, "w2", window=2, detail={
        "policy": "ekya-window", "server": "edge-1", "streams": streams})  # fmt: skip
    route = _served(sqlite_store, tmp_path / "data", spec, (old, new))
    assert route.share == InferenceShare(share, 2, "edge-1")
    assert route.threads == threads and route.shape.gpus == pytest.approx(gpus)


@pytest.mark.parametrize(("live", "device", "gpus"), [
    (True, "cuda", 0.3),  # a live edge server with a GPU: the share is the GPU fraction
    (True, "cpu", 0.0),  # ... without one: CPU threads
    (False, "cuda", 0.0),  # an emulated server: the learner's GPU is not the replicas'
])  # fmt: skip
def test_a_live_edge_server_with_a_gpu_serves_its_share_on_it(
    tmp_path: Path, sqlite_store: JobStore, live: bool, device: str, gpus: float
) -> None:  # fmt: skip
    target = ({"kind": "edge-server", "live": True, "nodes": ["n1"], "gpus": 1} if live
              else {"kind": "edge-server", "gpus": 1})  # fmt: skip
    one = {**SPEC["serving"], "replicas": 1}
    spec = DeploymentSpec.model_validate({**SPEC, "name": "edge", "target": target,
                                          "update": {"policy": "ekya-window"},
                                          "serving": one})  # fmt: skip
    window = Event(EventKind.ALLOCATION, "w1", window=1, detail={
        "policy": "ekya-window", "server": "n1", "device": device,
        "streams": [{"stream_id": "edge", "inference_gpus": 0.3}]})  # fmt: skip
    route = _served(sqlite_store, tmp_path / "data", spec, (window,))
    assert route.share is not None and route.share.on_gpu == (gpus > 0)
    assert route.shape.gpus == gpus
    assert route.threads == 1


def test_a_deployment_on_nodes_ignores_allocation_events(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    workers = Event(EventKind.ALLOCATION, "deep-edge", window=1, detail={"workers": []})
    route = _served(
        sqlite_store, tmp_path / "data", DeploymentSpec.model_validate(SPEC), (workers,)
    )
    assert route.share is None and route.threads == 1
    assert route.shape.nodes == tuple(DeploymentSpec.model_validate(SPEC).target.nodes)


def test_a_deployment_past_the_capacity_waits_and_says_why(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """Two tenants' deployments hold the data plane's 2 CPUs: the third tenant's is left
    out of the table (Ray would never place its replica) and its ``serving`` event says why;
    once one stops, it is served and says so; its tenant's jobs have the rest of its quota."""
    from deepedge.controlplane.loop import ControlPlane
    from deepedge.service.config import ServiceSettings

    store, data = sqlite_store, tmp_path / "data"
    registry = DeploymentStore(store)
    site = Site(data)
    made = {}
    for k, name in enumerate(("alice", "bob", "carol")):
        tenant = store.create_tenant(name, f"tok-{name}", max_cores=4)
        spec = DeploymentSpec.model_validate({**SPEC, "name": f"cam-{name}",
                                              "serving": {"replicas": 1, "cpus": 1.0}})  # fmt: skip
        deployment, _ = registry.create(tenant.id, spec, now=float(k))
        write_version(artifact_path(data, deployment, 1), make_edge_model(10, 16, 8, seed=k))
        site.export(deployment, artifact_path(data, deployment, 1))
        registry.commit(registry.get_by_id(deployment.id), Step(
            deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
            versions=(VersionChange(1, VersionStatus.CANDIDATE),
                      VersionChange(1, VersionStatus.SERVING)),
        ))  # fmt: skip
        made[name] = (tenant, deployment)
    assert set(serving_table(store, data, cpus=2.0, gpus=0.0).routes) == {"alice.cam-alice",
                                                                         "bob.cam-bob"}  # fmt: skip
    plane = ControlPlane(store, ServiceSettings(data_dir=data, serving=True, serving_cpus=2))
    plane.tick(0.0)
    plane.tick(1.0)  # (said once)
    carol = made["carol"][1]
    said = [e for e in registry.events(carol.id) if e.kind is EventKind.SERVING]
    assert len(said) == 1 and said[0].detail["state"] == "waiting"
    assert "2 CPUs taken by cam-alice (1), cam-bob (1)" in said[0].message
    assert plane.serving_cores(made["alice"][0].id) == (1.0, 0.0)
    assert plane.serving_cores(made["carol"][0].id) == (0.0, 0.0)  # it serves nothing
    registry.commit(registry.get_by_id(made["bob"][1].id),
                    Step(deployment={"status": DeploymentStatus.STOPPED}))  # fmt: skip
    plane.tick(2.0)
    said = [e for e in registry.events(carol.id) if e.kind is EventKind.SERVING]
    assert [e.detail["state"] for e in said] == ["waiting", "admitted"]
    assert "carol.cam-carol" in serving_table(store, data, cpus=2.0, gpus=0.0).routes
