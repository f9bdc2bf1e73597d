"""``/v1/nodes`` and ``POST /v1/deployments`` on a service that runs on a Ray cluster, over
a node watcher's snapshot written by the test (no cluster: the API reads only the file)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from deepedge.api.app import create_app
from deepedge.cluster.live_nodes import (
    STALE_AFTER_S,
    LiveApp,
    LiveNode,
    LiveNodes,
    NodeResources,
    write_snapshot,
)
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.service.config import ServiceSettings
from deepedge.service.records import JobId
from deepedge.service.sandbox import Isolation
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore

ADDRESS = "10.0.0.1:6379"
AUTH = {"Authorization": "Bearer token-alice"}


def snapshot(taken_at: float, lost: tuple[str, ...] = ("old",)) -> LiveNodes:
    def node(node_id: str, device: str, address: str) -> LiveNode:
        gone = node_id in lost
        return LiveNode(
            node_id=node_id, status=NodeStatus.LOST if gone else NodeStatus.ALIVE,
            device=device, age_s=9.0 if gone else 0.5, cpu_util=0.4,
            gpu_util=0.1, mem_util=0.3, mem_total_mb=4096.0, ray_node_id=f"ray-{node_id}",
            hostname=f"host-{node_id}", address=address,
            lost_at=taken_at - 6.0 if gone else None,
            apps=[LiveApp(name="cam", kind="sift", deadline_s=0.2)], labels={"zone": "a"},
            resources=NodeResources(cpus=4, memory_mb=2500.0, object_store_mb=700.0),
        )  # fmt: skip

    return LiveNodes(
        taken_at=taken_at,
        ray_address=ADDRESS,
        nodes=[node("nano-a", "jetson-nano", "10.0.0.2"), node("nano-b", "jetson-nano", "10.0.0.3"),
               node("pi", "raspberry-pi-4", "10.0.0.1"), node("old", "jetson-tx2", "10.0.0.9")],
    )  # fmt: skip


def service(data_dir: Path, isolation: Isolation, run_manager: bool = True) -> TestClient:
    settings = ServiceSettings(data_dir=data_dir, tick_s=0.05, ray_address=ADDRESS,
                               isolation=isolation)  # fmt: skip
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("alice", "token-alice")
    store.dispose()
    return TestClient(create_app(settings, run_manager=run_manager), base_url="http://localhost")


@pytest.fixture
def trusted(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    with service(tmp_path, Isolation.TRUSTED) as client:
        yield client, tmp_path


LIVE = {"name": "line", "target": {"live": True, "nodes": ["nano-a", "nano-b"]},
        "update": {"ps_node": "pi"}, "base_epochs": 0}  # fmt: skip


def test_without_a_view_of_the_cluster_the_service_says_so(
    trusted: tuple[TestClient, Path],
) -> None:
    client, _ = trusted
    assert client.get("/v1/nodes", headers=AUTH).status_code == 503
    refused = client.post("/v1/deployments", headers=AUTH, json=LIVE)
    assert refused.status_code == 503 and ADDRESS in refused.json()["message"]


def test_the_nodes_view_shows_the_agents_of_the_cluster(trusted: tuple[TestClient, Path]) -> None:
    client, data_dir = trusted
    write_snapshot(data_dir, snapshot(time.time()))
    assert client.post("/v1/deployments", headers=AUTH, json=LIVE).status_code == 201
    page = client.get("/v1/nodes", headers=AUTH).json()
    assert page["cluster"] == ADDRESS and not page["stale"]
    nodes = {n["name"]: n for n in page["nodes"]}
    assert set(nodes) == {"nano-a", "nano-b", "pi", "old"}  # not the emulated testbed's
    assert nodes["old"]["state"] == "lost" and nodes["nano-a"]["state"] == "up"
    nano = nodes["nano-a"]
    assert nano["source"] == "live" and nano["device"] == "jetson-nano"
    assert nano["utilisation"] == {"cpu": 0.4, "gpu": 0.1, "mem": 0.3}
    assert nano["ray_node_id"] == "ray-nano-a" and nano["labels"] == {"zone": "a"}
    assert nano["apps"][0]["name"] == "cam" and nano["resources"]["object_store_mb"] == 700.0
    assert nano["deployments"] == ["line"] and nano["role"] == "worker"
    assert nodes["pi"]["deployments"] == ["line"] and nodes["pi"]["role"] == "parameter-server"
    assert nodes["old"]["deployments"] == []
    assert (nano["address"], nano["hostname"], nano["lost_at"]) == ("10.0.0.2", "host-nano-a", None)
    assert nodes["old"]["lost_at"] == pytest.approx(page["taken_at"] - 6.0)


def test_each_node_says_what_runs_on_it_and_a_lost_one_runs_nothing(tmp_path: Path) -> None:
    """A running live update of deployment ``line``: its workers on the Nanos, its PS on
    the Pi; once nano-b is lost, neither its work nor a link to that job is left on it."""
    with service(tmp_path, Isolation.TRUSTED, run_manager=False) as client:
        write_snapshot(tmp_path, snapshot(time.time()))
        assert client.post("/v1/deployments", headers=AUTH, json=LIVE).status_code == 201
        document = {"live_cluster": True, "train_data": "train.npz", "dataset_size": 100,
                    "nodes": ["nano-a", "nano-b"], "ps_node": "pi"}  # fmt: skip
        manifest = {"name": "upd", "kind": "model-update", "resources": {"mem_mb": 8192},
                    "spec": {"document": document}}  # fmt: skip
        answer = client.post("/v1/jobs", headers=AUTH, json=manifest)
        assert answer.status_code == 201, answer.text
        job = answer.json()["id"]
        store = JobStore(ServiceSettings(data_dir=tmp_path).url)
        for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING):
            store.transition(JobId(job), status, "test")
        registry = DeploymentStore(store)
        (line,) = registry.of_tenant(store.tenant_by_token("token-alice").id)  # type: ignore[union-attr]
        registry.commit(line, Step(deployment={"current_job_id": job}))
        store.dispose()

        def on(page: dict[str, Any]) -> dict[str, Any]:
            return {n["name"]: n for n in page["nodes"]}

        nodes = on(client.get("/v1/nodes", headers=AUTH).json())
        worker = {"kind": "update-worker", "deployment": "line", "job": job, "version": None}
        assert nodes["nano-a"]["work"] == [worker] and nodes["nano-b"]["work"] == [worker]
        assert nodes["pi"]["work"] == [{**worker, "kind": "parameter-server"}]
        assert nodes["nano-b"]["jobs"] == [job] and nodes["old"]["work"] == []

        write_snapshot(tmp_path, snapshot(time.time(), lost=("old", "nano-b")))
        nodes = on(client.get("/v1/nodes", headers=AUTH).json())
        assert nodes["nano-b"]["state"] == "lost" and nodes["nano-b"]["lost_at"] is not None
        assert nodes["nano-b"]["work"] == [] and nodes["nano-b"]["jobs"] == []
        assert nodes["nano-a"]["work"] == [worker] and nodes["nano-a"]["jobs"] == [job]


@pytest.mark.parametrize(
    ("document", "field", "words"),
    [
        ({"target": {"live": True, "nodes": ["nano-a", "nano-z"]}}, "target.nodes", "nano-z"),
        ({"target": {"live": True, "nodes": ["old"]}}, "target.nodes", "old"),  # lost
        ({"target": {"live": True, "selector": {"labels": {"zone": "b"}}}}, "target.selector",
         "matches no alive agent"),
        ({}, "target.live", "emulated testbed"),
        ({"target": {"live": True}, "update": {"resources": {"mem_mb": 1024}}},
         "update.resources.mem_mb", "700 MiB"),
    ],
)  # fmt: skip
def test_a_deployment_the_cluster_cannot_take_is_a_422_saying_why(
    trusted: tuple[TestClient, Path], document: dict[str, Any], field: str, words: str
) -> None:
    client, data_dir = trusted
    write_snapshot(data_dir, snapshot(time.time()))
    answer = client.post("/v1/deployments", headers=AUTH, json={"name": "bad", **document})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == field and words in body["message"]
    if field == "target.nodes":
        assert body["alive"] == ["nano-a", "nano-b", "pi"]
    assert client.get("/v1/deployments", headers=AUTH).json()["deployments"] == []


def test_a_selector_is_stored_as_the_node_ids_it_chose(trusted: tuple[TestClient, Path]) -> None:
    client, data_dir = trusted
    write_snapshot(data_dir, snapshot(time.time()))
    document = {"name": "nanos", "base_epochs": 0,
                "target": {"live": True, "selector": {"device_type": "jetson-nano"}}}  # fmt: skip
    created = client.post("/v1/deployments", headers=AUTH, json=document)
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["target"]["nodes"] == ["nano-a", "nano-b"]


def test_a_stale_view_is_not_trusted(trusted: tuple[TestClient, Path]) -> None:
    client, data_dir = trusted
    write_snapshot(data_dir, snapshot(time.time() - STALE_AFTER_S - 5))
    assert client.post("/v1/deployments", headers=AUTH, json=LIVE).status_code == 503
    assert client.get("/v1/nodes", headers=AUTH).json()["stale"] is True


def test_a_sandboxing_service_refuses_a_live_deployment_at_deploy_time(tmp_path: Path) -> None:
    write_snapshot(tmp_path, snapshot(time.time()))
    with service(tmp_path, Isolation.SANDBOX) as client:
        answer = client.post("/v1/deployments", headers=AUTH, json=LIVE)
    assert answer.status_code == 422
    assert "--trusted-tenants" in answer.json()["message"]


def test_a_live_jobs_memory_limit_must_hold_the_object_store(
    trusted: tuple[TestClient, Path],
) -> None:
    """A job once lost on a live cluster: ``live_cluster`` with ``mem_mb: 4096`` died in
    Ray's mmap; it is refused at submission now, naming both figures (nothing is created)."""
    client, data_dir = trusted
    write_snapshot(data_dir, snapshot(time.time()))
    manifest = {"name": "live", "kind": "model-update", "resources": {"mem_mb": 4096},
                "spec": {"document": {"live_cluster": True, "train_data": "train.npz",
                                      "dataset_size": 100}}}  # fmt: skip
    answer = client.post("/v1/jobs", headers=AUTH, json=manifest)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == "resources.mem_mb" and body["needed_mb"] == 700 + 4096
    assert "4096 MiB" in body["message"] and "object store of 700 MiB" in body["message"]
    assert client.get("/v1/jobs", headers=AUTH).json()["jobs"] == []
