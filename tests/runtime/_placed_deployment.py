"""A placed deployment for the data plane's tests on live nodes: its store, its MVSP
decision (two cameras, one single-replica b8 group each, on n1 and n2; the head spare), the
data plane started on whatever Ray the caller connected, and the helpers that read what
happened from answers and from Ray's actor table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from _support import wait_until

WORKERS = ("n1", "n2")  # raylets beside the head
NODES = (*WORKERS, "head")  # every node of a LocalRayCluster has its deepedge-node resource
CAMERAS = ("c1", "c2")
# One b8 instance fits a node (1400 of 1500 MB) and carries one camera (100 of 120 req/s):
# c1 is nearest n1, c2 nearest n2, the head is far from both and spare for a re-placement.
PROBLEM: dict[str, Any] = {
    "name": "cams",
    "sources": [{"id": c, "demands": [{"model": "cam", "rate_rps": 100.0,
                                       "max_latency_ms": 500.0}]} for c in CAMERAS],
    "edge_nodes": [{"id": n, "memory_mb": 1500.0} for n in NODES],
    "links": [{"a": c, "b": n, "delay_ms": 1.0 if i == k else 5.0 if n != "head" else 20.0}
              for i, c in enumerate(CAMERAS) for k, n in enumerate(NODES)],
    "models": [{"id": "cam", "variants": [
        {"id": "b1", "batch_size": 1, "latency_ms": 5.0, "memory_mb": 900.0, "max_load_rps": 30.0},
        {"id": "b8", "batch_size": 8, "latency_ms": 20.0, "memory_mb": 1400.0,
         "max_load_rps": 120.0}]}],
}  # fmt: skip
SPEC: dict[str, Any] = {
    "name": "cam",
    "labeller": "ground-truth",
    "window_s": 3600,
    "base_epochs": 1,
    "stream": {"window_size": 100},
    "serving": {"cpus": 0.25, "sample_fraction": 0.0, "max_batch_size": 8},
    "placement": PROBLEM,
}


@dataclass
class Placed:
    url: str
    key: str
    routes: dict[str, tuple[str, str]]  # camera -> (variant, node) of the decision
    image: np.ndarray
    data_dir: Path  # the service's: its store, and the controller's journal of decisions
    deployment_id: str


def start_placed(data_dir: Path, address: str | None) -> tuple[Placed, Any]:
    """The deployment decided and served on the Ray this process is connected to (at
    ``address``); returns it with its store (for the caller to dispose of)."""
    from ray import serve

    from deepedge.api.local_server import free_port
    from deepedge.controlplane.artifacts import artifact_path, write_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step, VersionChange
    from deepedge.controlplane.inference_keys import InferenceKeyStore
    from deepedge.controlplane.records import Event, EventKind
    from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
    from deepedge.controlplane.serving import TableSource
    from deepedge.controlplane.site import Site
    from deepedge.dataplane.sample_store import sample_store_path
    from deepedge.dataplane.serving_decisions import decisions_path
    from deepedge.planning.placement import plan_placement
    from deepedge.planning.placement.model import PlacementProblem
    from deepedge.runtime.serving.dataplane import DataPlaneAddress, start_data_plane
    from deepedge.service.store import JobStore, sqlite_url

    store = JobStore(sqlite_url(data_dir / "service.db"))
    store.migrate()
    tenant = store.create_tenant("t", "tok-t", max_cores=64)
    registry = DeploymentStore(store)
    spec = DeploymentSpec.model_validate(SPEC)
    deployment, _ = registry.create(tenant.id, spec, now=0.0)
    site = Site(data_dir)
    write_version(artifact_path(data_dir, deployment, 1), site.base_model(spec))
    site.export(deployment, artifact_path(data_dir, deployment, 1))
    solution = plan_placement(PlacementProblem.model_validate(PROBLEM), "heuristic", 10.0)
    decided = Event(EventKind.PLACEMENT, "decided", detail={
        "state": "decided", "method": "heuristic", "status": solution.status.value,
        "placements": [p.model_dump() for p in solution.placements],
        "routes": [r.model_dump() for r in solution.routes]})  # fmt: skip
    registry.commit(registry.get_by_id(deployment.id), Step(
        deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
        events=(decided,),
    ))  # fmt: skip
    _, key = InferenceKeyStore(store).create(registry.get_by_id(deployment.id), "camera")
    routes = {r.source: (r.variant, r.node) for r in solution.routes}
    assert {node for _, node in routes.values()} == set(WORKERS), solution  # the head spare
    port = free_port()
    # Serve on its own port (the data plane's ingress takes ``port``), on the head only:
    # a proxy per raylet of this machine would all ask for the same port
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": free_port()})
    start_data_plane(address, DataPlaneAddress("127.0.0.1", port),
                     TableSource(store.url, str(data_dir)), sample_store_path(data_dir),
                     0.1, decisions_path(data_dir))  # fmt: skip
    image = site.stream(spec).window(0).images[0]
    placed = Placed(f"http://127.0.0.1:{port}", key, routes, image, data_dir, deployment.id)
    # ready: every camera answered by its own group (a group still loading is skipped, and
    # tried last for a while, by the camera router: that answer is a fallback)
    ready = wait_until(lambda: all(infer(placed, c)[2].get("deepedge-fallback") == "0"
                                   for c in CAMERAS),
                       timeout_s=180, interval_s=0.5)  # fmt: skip
    assert ready, "the placed deployment never answered"
    return placed, store


def body(image: np.ndarray) -> bytes:
    tensor = {"name": "input", "shape": [1, *image.shape], "datatype": "FP32",
              "data": image.astype(np.float32).ravel().tolist()}  # fmt: skip
    return json.dumps({"inputs": [tensor]}).encode()


def infer(placed: Placed, camera: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    import httpx

    try:
        answer = httpx.post(
            f"{placed.url}/v2/models/t.cam/infer", content=body(placed.image), timeout=15.0,
            headers={"Authorization": f"Bearer {placed.key}", "deepedge-camera": camera,
                     "Content-Type": "application/json"}, trust_env=False,
        )  # fmt: skip
    except httpx.HTTPError:
        return 0, {}, {}
    params = answer.json().get("parameters", {}) if answer.status_code == 200 else {}
    return answer.status_code, params, dict(answer.headers)


def ray_node_of(deepedge_node: str) -> str:
    import ray

    wanted = f"deepedge-node:{deepedge_node}"
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and wanted in n["Resources"])


def group_replicas() -> dict[str, set[str]]:
    """Serve deployment name -> the Ray nodes its alive replicas run on (Ray's actor table),
    for the deployment's replica groups (each a Serve application of its own)."""
    from ray._private import state

    from deepedge.runtime.serving.camera_router import group_apps_prefix

    wanted = f"ServeReplica:{group_apps_prefix('t.cam')}"
    out: dict[str, set[str]] = {}
    for info in state.actors().values():
        name = info.get("ActorClassName", "")
        if info.get("State") != "ALIVE" or not name.startswith(wanted):
            continue
        deployment = name.rsplit(":", 1)[1]
        out.setdefault(deployment, set()).add(info["Address"]["NodeID"])
    return out


def router_replicas() -> dict[str, str]:
    """The deployment's alive camera-router replicas: actor id -> Ray node."""
    from ray._private import state

    return {
        actor_id: info["Address"]["NodeID"]
        for actor_id, info in state.actors().items()
        if info.get("State") == "ALIVE"
        and info.get("ActorClassName") == "ServeReplica:model-t.cam:CameraRouter"
    }


def controller() -> Any:
    import ray

    from deepedge.runtime.serving.dataplane import CONTROLLER, NAMESPACE

    return ray.get_actor(CONTROLLER, namespace=NAMESPACE)


def group_name(variant: str, node: str) -> str:
    from deepedge.dataplane.replica_groups import ReplicaGroup
    from deepedge.runtime.serving.camera_router import group_deployment

    return group_deployment(ReplicaGroup(variant, node, 1))


def check_routed(placed: Placed) -> None:
    """Every group's replicas on its node (Ray's actor table), every camera answered by the
    variant on the node its route names, an unknown camera answered by a fallback."""
    import ray

    from deepedge.dataplane.replica_groups import ReplicaGroup
    from deepedge.runtime.serving.camera_router import group_deployment

    replicas = group_replicas()
    for variant, node in set(placed.routes.values()):
        name = group_deployment(ReplicaGroup(variant, node, 1))
        assert replicas.get(name) == {ray_node_of(node)}, (name, replicas)
    for camera, (variant, node) in placed.routes.items():
        for _ in range(5):
            status, params, headers = infer(placed, camera)
            assert status == 200
            assert (params["variant"], params["node"]) == (variant, node)
            assert params["ray_node"] == ray_node_of(node)
            assert headers["deepedge-fallback"] == "0"
    status, _, headers = infer(placed, "c-unknown")
    assert status == 200 and headers["deepedge-fallback"] == "1"
    assert set(router_replicas().values()) == {ray_node_of("head")}  # the controller's node
    plans = ray.get(controller().placements.remote())
    assert plans["t.cam"].cause == "placement decision"
