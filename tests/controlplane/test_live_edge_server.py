"""A live edge server, the parts without Ray: the target document, the service resolving it
against the node watcher's snapshot (one alive agent, its resources as the window's ``G``),
the refusals, the edge server's window planned on the node's resources and pinned to it,
and the window's actors' Ray options."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from _traffic import LiveTrafficPlane
from pydantic import ValidationError

from deepedge.cluster.live_nodes import LiveNode, LiveNodes, NodeResources, write_snapshot
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployment_spec import DeploymentSpec, Target
from deepedge.controlplane.edge_server_window import window_document
from deepedge.controlplane.live_nodes import (
    MAX_EDGE_SERVER_GPUS,
    edge_server_capacity,
    place_deployment,
)
from deepedge.controlplane.records import EventKind
from deepedge.controlplane.rollout_actions import request_update
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.core.errors import InvalidInputError
from deepedge.service.config import ServiceSettings
from deepedge.service.manifest import JobKind
from deepedge.service.sandbox import Isolation
from deepedge.service.store import JobStore, manifest_of

ADDRESS = "10.0.0.1:6379"


def node(node_id: str, device: str = "jetson-nano", cpus: float = 4.0, gpus: float = 0.0,
         status: NodeStatus = NodeStatus.ALIVE, zone: str = "a") -> LiveNode:  # fmt: skip
    return LiveNode(
        node_id=node_id, status=status, device=device, age_s=0.3, cpu_util=0.2,
        gpu_util=None, mem_util=0.3, mem_total_mb=4096.0, labels={"zone": zone},
        resources=NodeResources(cpus=cpus, gpus=gpus, memory_mb=8000.0, object_store_mb=500.0),
    )  # fmt: skip


def site(taken_at: float = 1000.0, lost: tuple[str, ...] = ()) -> LiveNodes:
    nodes = [node("head", "raspberry-pi-4", zone="b"), node("n1", cpus=3.0),
             node("n2", cpus=2.0), node("gpu-1", "jetson-tx2", cpus=8.0, gpus=2.0, zone="b"),
             node("gone", status=NodeStatus.LOST)]  # fmt: skip
    nodes = [n.model_copy(update={"status": NodeStatus.LOST}) if n.node_id in lost else n
             for n in nodes]  # fmt: skip
    return LiveNodes(taken_at=taken_at, ray_address=ADDRESS, nodes=nodes)


def edge(name: str = "cam", **target: Any) -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {"name": name, "target": {"kind": "edge-server", "live": True, **target},
         "update": {"policy": "ekya-window"}}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ({"nodes": ["n1", "n2"]}, "one agent"),
        ({}, "one agent"),  # neither named nor selected: which agent is the server?
        ({"nodes": ["n1", "n1"]}, "distinct"),
    ],
)
def test_a_live_edge_server_target_names_one_agent(target: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Target.model_validate({"kind": "edge-server", "live": True, **target})


def test_a_live_edge_server_target_is_a_document_the_spec_takes() -> None:
    named = edge(nodes=["n1"])
    assert named.target.live and named.target.nodes == ["n1"]
    selected = edge(selector={"device_type": "jetson-tx2"})
    assert selected.target.nodes == []  # resolved by the service
    with pytest.raises(ValidationError, match="runs on the edge server itself"):
        DeploymentSpec.model_validate(
            {"name": "d", "target": {"kind": "edge-server", "live": True, "nodes": ["n1"]},
             "update": {"policy": "ekya-window", "ps_node": "n2"}}
        )  # fmt: skip


@pytest.mark.parametrize(
    ("target", "nodes", "gpus"),
    [
        ({"nodes": ["n1"]}, ["n1"], 3.0),  # no GPU: its cores
        ({"nodes": ["gpu-1"], "gpus": 7.0}, ["gpu-1"], 2.0),  # its GPUs, whatever was declared
        ({"selector": {"device_type": "jetson-tx2"}}, ["gpu-1"], 2.0),
        ({"selector": {"labels": {"zone": "b"}, "device_type": "jetson-tx2"}}, ["gpu-1"],
         2.0),
    ],
)  # fmt: skip
def test_the_service_resolves_a_live_edge_server_into_one_node_and_its_resources(
    target: dict[str, Any], nodes: list[str], gpus: float
) -> None:
    placed = place_deployment(edge(**target), site(), ray_address=ADDRESS, sandboxed=False)
    assert placed.target.nodes == nodes and placed.target.gpus == gpus


@pytest.mark.parametrize(
    ("spec", "ray_address", "sandboxed", "field", "why"),
    [
        (edge(nodes=["n9"]), ADDRESS, False, "target.nodes", "n9 is not an alive agent"),
        (edge(nodes=["gone"]), ADDRESS, False, "target.nodes", "gone is not an alive agent"),
        (edge(selector={"labels": {"zone": "a"}}), ADDRESS, False, "target.selector",
         "matches n1, n2"),
        (edge(selector={"labels": {"zone": "z"}}), ADDRESS, False, "target.selector",
         "no alive agent"),
        (edge(nodes=["n1"]), None, False, "target.live", "runs without a Ray cluster"),
        (edge(nodes=["n1"]), ADDRESS, True, "target.live", "--trusted-tenants"),
        (DeploymentSpec.model_validate({"name": "old", "target": {"kind": "edge-server"},
                                        "update": {"policy": "ekya-window"}}),
         ADDRESS, False, "target.live", "target.live: true"),  # emulated edge-1 is not there
    ],
)  # fmt: skip
def test_a_live_edge_server_the_service_cannot_run_is_a_422_naming_the_field(
    spec: DeploymentSpec, ray_address: str | None, sandboxed: bool, field: str, why: str
) -> None:
    with pytest.raises(InvalidInputError, match=why.replace("-", r"\-")) as caught:
        place_deployment(spec, site(), ray_address=ray_address, sandboxed=sandboxed)
    assert caught.value.http_status == 422 and caught.value.field == field


@pytest.mark.parametrize(
    ("cpus", "gpus", "capacity"),
    [(4.0, 0.0, 4.0), (16.0, 1.0, 1.0), (256.0, 0.0, MAX_EDGE_SERVER_GPUS), (8.0, 0.5, 0.5)],
)
def test_an_edge_servers_capacity_is_its_gpus_else_its_cores(
    cpus: float, gpus: float, capacity: float
) -> None:
    assert edge_server_capacity(node("x", cpus=cpus, gpus=gpus)) == capacity


def test_the_windows_actors_are_pinned_to_the_live_node_with_its_device() -> None:
    from deepedge.planning.window.thief import ThiefScheduler
    from deepedge.runtime.edge.edge_server import EdgeServer

    emulated = EdgeServer(ThiefScheduler(), gpus=1.0, window_s=1.0, on_gpu=False)
    assert "resources" not in emulated._options(0.5)
    cpu = EdgeServer(ThiefScheduler(), gpus=3.0, window_s=1.0, node="n1", on_gpu=False)
    assert cpu._options(0.5) == {"num_cpus": 0, "max_concurrency": 4,
                                 "resources": {"deepedge-node:n1": 0.001}}  # fmt: skip
    gpu = EdgeServer(ThiefScheduler(), gpus=2.0, window_s=1.0, node="gpu-1", on_gpu=True)
    options = gpu._options(0.3)
    assert options["num_gpus"] == 0.3 and options["resources"] == {"deepedge-node:gpu-1": 0.001}


EDGE: dict[str, Any] = {
    "labeller": "ground-truth",
    "window_s": 1.0,
    "target": {"kind": "edge-server", "live": True, "nodes": ["n1"], "inference_gpus": 0.4},
    "stream": {"window_size": 120, "onset_window": 2, "ramp_windows": 1},
    "base_windows": 1,
    "base_epochs": 1,
    "update": {"policy": "ekya-window", "label_fraction": 1.0, "recent_windows": 1},
    "trigger": {
        "sample_count": None,
        "accuracy_threshold": 0.0,
        "cooldown_windows": 0,
    },  # on request only
}


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> LiveTrafficPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", host_gpus=0, traffic_settle_s=0.0,
                               ray_address=ADDRESS, isolation=Isolation.TRUSTED)  # fmt: skip
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def _two_on_n1(plane: LiveTrafficPlane) -> tuple[Any, dict[str, str]]:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    ids = {}
    for k, name in enumerate(("cam-a", "cam-b")):
        document = {**EDGE, "name": name, "stream": {**EDGE["stream"], "seed": k}}
        placed = place_deployment(DeploymentSpec.model_validate(document), site(),
                                  ray_address=ADDRESS, sandboxed=False)  # fmt: skip
        ids[name] = plane.deployments.create(tenant.id, placed, now=0.0)[0].id
    for now in range(4):  # first versions (one per tick) and a few windows
        plane.tick(float(now))
    assert all(plane.deployments.get_by_id(i).serving_version == 1 for i in ids.values())
    return tenant, ids


def test_deployments_on_one_live_node_share_one_window_planned_on_its_resources(
    plane: LiveTrafficPlane,
) -> None:
    tenant, ids = _two_on_n1(plane)
    request_update(plane.deployments, tenant.id, "cam-a")
    plane.tick(4.0)
    write_snapshot(plane.settings.data_dir, site(time.time()))
    plane.tick(5.0)
    (job,) = [j for j in plane.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    spec = window_document(job)
    assert spec is not None and spec.edge_server == "n1" and spec.live_node == "n1"
    assert spec.gpus == 3.0 and spec.device == "cpu"  # n1's cores, from the registry
    assert sorted(s.stream_id for s in spec.streams) == ["cam-a", "cam-b"]  # one window
    assert [s.stream_id for s in spec.retraining()] == ["cam-a"]
    resources = manifest_of(job).resources  # the node's resources are Ray's, not the quota's
    assert resources.cpus == 1 and resources.gpus == 0
    submitted = plane.deployments.last_event(ids["cam-a"], EventKind.JOB_SUBMITTED)
    assert submitted is not None and submitted.detail["live"]
    assert submitted.detail["nodes"] == ["n1"] and submitted.detail["gpus"] == 3.0


def test_a_lost_live_edge_server_fails_the_waiting_versions_naming_it(
    plane: LiveTrafficPlane,
) -> None:
    tenant, ids = _two_on_n1(plane)
    request_update(plane.deployments, tenant.id, "cam-a")
    plane.tick(4.0)
    write_snapshot(plane.settings.data_dir, site(time.time(), lost=("n1",)))
    plane.tick(5.0)
    assert not [j for j in plane.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    v2 = plane.deployments.version(ids["cam-a"], 2)
    assert v2.status is VersionStatus.FAILED
    failed = plane.deployments.last_event(ids["cam-a"], EventKind.JOB_FAILED)
    assert failed is not None and "n1 is not an alive agent" in failed.message


NANOS: dict[str, Any] = {
    "name": "line",
    "labeller": "ground-truth",
    "window_s": 1.0,
    "target": {"live": True, "selector": {"device_type": "jetson-nano"}},
    "stream": {"window_size": 120, "onset_window": 2, "ramp_windows": 1},
    "base_windows": 1,
    "base_epochs": 1,
    "update": {"label_fraction": 1.0, "recent_windows": 1},
    "trigger": {
        "sample_count": None,
        "accuracy_threshold": 0.0,
        "cooldown_windows": 0,
    },  # on request only
}


def _joined(nodes: list[LiveNode], taken_at: float) -> LiveNodes:
    return LiveNodes(taken_at=taken_at, ray_address=ADDRESS, nodes=nodes)


@pytest.mark.parametrize(("later", "trained_on", "note"), [
    (["n1", "n2"], ["n1", "n2"], None),  # as at creation
    (["n1", "n2", "n7"], ["n1", "n2", "n7"], "n7 joined"),  # a Nano that joined since
    (["n2"], ["n2"], "n1 no longer matched or not alive"),
])  # fmt: skip
def test_an_update_trains_on_the_agents_its_selector_matches_when_it_starts(
    plane: LiveTrafficPlane, later: list[str], trained_on: list[str], note: str | None
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    placed = place_deployment(DeploymentSpec.model_validate(NANOS), site(),
                              ray_address=ADDRESS, sandboxed=False)  # fmt: skip
    assert placed.target.nodes == ["n1", "n2"] and placed.target.follows_selector
    deployment_id = plane.deployments.create(tenant.id, placed, now=0.0)[0].id
    for now in range(4):
        plane.tick(float(now))
    nanos = [node(n) for n in later] + [node("head", "raspberry-pi-4")]
    write_snapshot(plane.settings.data_dir, _joined(nanos, time.time()))
    request_update(plane.deployments, tenant.id, "line")
    plane.tick(4.0)
    plane.tick(5.0)
    submitted = plane.deployments.last_event(deployment_id, EventKind.JOB_SUBMITTED)
    assert submitted is not None, plane.deployments.events(deployment_id)
    assert submitted.detail["nodes"] == trained_on
    assert (note is None) == ("selector" not in submitted.message), submitted.message
    if note is not None:
        assert note in submitted.message
