"""A deployment on live nodes, end to end: the service on a real Ray cluster.

A :class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster` (a head and raylets n1, n2, n3,
one CPU each) with an agent per node (n1 and n2 call themselves Jetson Nanos); the service
runs as a child process on loopback with ``--ray-address`` and ``--trusted-tenants`` (its
node watcher writes the registry down), no data plane: the test is the camera and the
data plane, writing the deployment's labelled traffic straight into the site's sample
store. The deployment takes the Nanos by selector with the parameter server on n3; an
update is requested, plans from the agents' reports, and the test checks where its actors
ran from Ray's own actor table, against the decision the deployment recorded.

On the same cluster, an Ekya deployment on a live edge server (n2) with the data plane on:
its serving replica runs on n2, its window's actors too, and once the window's decision is
recorded the replica answers with the share Thief gave its stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _support import wait_until
from deepedge.api.local_server import ServerProcess, make_tenant
from deepedge.cluster.devices import DeviceType
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import (
    FEEDBACK,
    Retention,
    Sample,
    SampleStore,
    sample_store_path,
)
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation

pytestmark = [pytest.mark.ray, pytest.mark.slow]

AUTH = {"Authorization": "Bearer tok-alice"}
WAIT_S = 240.0  # generous: Ray and the service start on a loaded 2-core machine
DEPLOYMENT = {
    "name": "line",
    "workload": "digits",
    "labeller": "ground-truth",
    "target": {"live": True, "selector": {"device_type": "jetson-nano"}},
    "update": {"ps_node": "n3", "epochs": 2, "recent_windows": 2},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.0},  # updates only on request
    "canary": {"windows": 0},
    "stream": {"window_size": 60, "onset_window": 1},
    "window_s": 1.0,
    "base_windows": 1,
    "base_epochs": 1,
}


class Cluster:
    def __init__(self, address: str, agents: list[Any]) -> None:
        self.address = address
        self.agents = agents  # kept: an actor whose last handle goes away is stopped


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    import ray

    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster
    from deepedge.runtime.cluster.node_agent import start_agent
    from deepedge.runtime.cluster.session import ensure_ray

    if ray.is_initialized():
        ray.shutdown()
    local = LocalRayCluster(worker_ids=("n1", "n2", "n3"), cpus_per_node=1)
    try:
        local.start()
        ensure_ray(address=local.address)
        devices = {"head": DeviceType.RASPBERRY_PI_4, "n1": DeviceType.JETSON_NANO,
                   "n2": DeviceType.JETSON_NANO, "n3": DeviceType.RASPBERRY_PI_4}  # fmt: skip
        agents = [start_agent(n, d, (), 0.5, 3.0) for n, d in devices.items()]
        LiveCluster().wait_for(devices, timeout_s=180)
        yield Cluster(local.address, agents)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        local.stop()


def _camera(
    data_dir: Path, deployment_id: str, stop: threading.Event, document: dict[str, Any] = DEPLOYMENT
) -> None:
    """Labelled traffic for the deployment's windows: the site's digits, answered by v1."""
    from deepedge.controlplane.site import Site

    stream = Site(data_dir / "camera").stream(DeploymentSpec.model_validate(document))
    store = SampleStore(sample_store_path(data_dir))
    sent = 0
    while not stop.wait(0.2):
        window = stream.window(1 + sent // 60)
        now = time.time()
        ids = [f"r{sent + i}" for i in range(len(window.labels))]
        samples = [Sample(r, now, 1, RouteKind.SERVING, int(y), x)
                   for r, x, y in zip(ids, window.images, window.labels, strict=True)]  # fmt: skip
        store.append(deployment_id, samples, Retention(), now=now)
        store.label_many(deployment_id, list(zip(ids, map(int, window.labels), strict=True)),
                         FEEDBACK, now)  # fmt: skip
        sent += len(ids)
    store.close()


def _ray_actor_nodes() -> dict[str, list[str]]:
    """Ray's own actor table (the GCS's): the Ray nodes each update actor class ran on."""
    from ray._private import state

    nodes: dict[str, list[str]] = {}
    for actor in state.actors().values():
        name = actor.get("ActorClassName", "")
        if name in {"TrainingWorker", "ParameterServer", "InferenceJob", "RetrainingJob"}:
            nodes.setdefault(name, []).append(actor["Address"]["NodeID"])
    return nodes


def test_a_deployment_on_live_nodes_trains_on_the_nodes_its_decision_names(
    cluster: Cluster, tmp_path: Path
) -> None:
    from deepedge.runtime.cluster.node_agent import registered_nodes

    settings = ServiceSettings(data_dir=tmp_path / "svc", isolation=Isolation.TRUSTED,
                               ray_address=cluster.address)  # fmt: skip
    make_tenant(settings, "alice", "tok-alice")
    server = ServerProcess(settings)
    server.start(timeout_s=120)
    stop = threading.Event()
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30, trust_env=False) as api:

            def live_nodes() -> dict[str, Any]:
                answer = api.get("/v1/nodes")
                return answer.json() if answer.status_code == 200 else {}

            assert wait_until(lambda: len(live_nodes().get("nodes", [])) == 4, 120)
            page = live_nodes()
            assert page["cluster"] == cluster.address and not page["stale"]
            shown = {n["name"]: n for n in page["nodes"]}
            assert shown["n1"]["device"] == "jetson-nano" and shown["n1"]["source"] == "live"
            assert all(n["state"] == "up" and n["ray_node_id"] for n in shown.values())
            assert shown["n3"]["resources"]["object_store_mb"] > 0

            # a node that is not there: 422 naming it and the alive ones, nothing created
            bad = {**DEPLOYMENT, "name": "bad", "target": {"live": True, "nodes": ["n1", "n9"]}}
            refused = api.post("/v1/deployments", json=bad)
            assert refused.status_code == 422, refused.text
            assert refused.json()["unknown"] == ["n9"]
            assert refused.json()["alive"] == ["head", "n1", "n2", "n3"]
            emulated = api.post("/v1/deployments", json={"name": "old"})
            assert emulated.status_code == 422 and "target.live" in emulated.text

            created = api.post("/v1/deployments", json=DEPLOYMENT)
            assert created.status_code == 201, created.text
            assert created.json()["spec"]["target"]["nodes"] == ["n1", "n2"]
            deployment_id = created.json()["id"]

            def serving() -> bool:
                return api.get("/v1/deployments/line").json()["serving_version"] == 1

            assert wait_until(serving, WAIT_S)
            camera = threading.Thread(target=_camera, args=(settings.data_dir, deployment_id,
                                                            stop), daemon=True)  # fmt: skip
            camera.start()

            def window() -> int:
                return int(api.get("/v1/deployments/line").json()["window"])

            # the update trains on the newest windows: ask once they all hold the camera's
            # samples (windows advance from creation, before the camera starts)
            began = window()
            assert wait_until(lambda: window() >= began + DEPLOYMENT["update"]["recent_windows"]
                              + 1, WAIT_S)  # fmt: skip
            assert api.post("/v1/deployments/line/update").status_code == 202

            def events() -> list[dict[str, Any]]:
                return list(api.get("/v1/deployments/line/events").json()["events"])

            def settled() -> bool:  # a decision, or the version's failure
                return any(e["kind"] in {"allocation", "job-failed"} for e in events())

            assert wait_until(settled, WAIT_S), events()
            failed = [e for e in events() if e["kind"] == "job-failed"]
            assert not failed, failed
            decision = next(e for e in events() if e["kind"] == "allocation")
            submitted = next(e for e in api.get("/v1/deployments/line/events").json()["events"]
                             if e["kind"] == "job-submitted")  # fmt: skip
            shown = {n["name"]: n for n in live_nodes()["nodes"]}
    finally:
        stop.set()
        server.stop()

    detail = decision["detail"]
    assert submitted["detail"]["nodes"] == ["n1", "n2"] and submitted["detail"]["live"]
    assert submitted["detail"]["resources"]["mem_mb_derived"]
    assert detail["live"] and detail["planned_on"] == "catalog"  # no models_dir given
    assert detail["ps_node"] == "n3"
    selected = sorted(w["node"] for w in detail["workers"] if w["selected"])
    assert set(selected) <= {"n1", "n2"} and selected == sorted(detail["workers_ran_on"])
    assert "n3" in decision["message"] and "catalog" in decision["message"]
    # From Ray itself: every worker actor on a Nano the decision names, the PS on n3.
    ray_ids = {v.report.node_id: v.report.ray_node_id for v in registered_nodes()}
    actors = _ray_actor_nodes()
    assert sorted(actors["ParameterServer"]) == [ray_ids["n3"]] * len(actors["ParameterServer"])
    assert set(actors["TrainingWorker"]) == {ray_ids[n] for n in selected}
    assert "line" in shown["n1"]["deployments"] and "line" in shown["n3"]["deployments"]
    assert shown["n3"]["role"] == "parameter-server"


EDGE = {
    "name": "gate-cam",
    "workload": "digits",
    "labeller": "ground-truth",
    "target": {"kind": "edge-server", "live": True, "nodes": ["n2"], "inference_gpus": 0.4},
    "update": {"policy": "ekya-window", "recent_windows": 2, "label_fraction": 1.0,
               "retraining_window_s": 60},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.0},  # updates only on request
    "canary": {"windows": 0},
    "gate": {"min_gain": -1.0},  # the test is about the share, not the gate's verdict
    "serving": {"cpus": 0.5, "sample_fraction": 0.0},
    "stream": {"window_size": 60, "onset_window": 1},
    "window_s": 1.0,
    "base_windows": 1,
    "base_epochs": 1,
}  # fmt: skip


def _infer(endpoint: str, key: str, image: Any) -> dict[str, Any]:
    """One request's OIP ``parameters`` (who answered, with which share); {} if none."""
    tensor = {"name": "input", "shape": [1, *image.shape], "datatype": "FP32",
              "data": image.astype("float32").ravel().tolist()}  # fmt: skip
    try:
        auth = {"Authorization": f"Bearer {key}"}
        answer = httpx.post(f"{endpoint}/infer", json={"inputs": [tensor]}, timeout=15.0,
                            headers=auth, trust_env=False)  # fmt: skip
    except httpx.HTTPError:
        return {}
    return dict(answer.json().get("parameters", {})) if answer.status_code == 200 else {}


def test_an_ekya_deployment_on_a_live_edge_server_serves_there_with_its_windows_share(
    cluster: Cluster, tmp_path: Path
) -> None:
    from deepedge.api.local_server import free_port
    from deepedge.controlplane.site import Site
    from deepedge.runtime.cluster.node_agent import registered_nodes

    settings = ServiceSettings(data_dir=tmp_path / "svc", isolation=Isolation.TRUSTED,
                               ray_address=cluster.address, serving=True,
                               serving_port=free_port())  # fmt: skip
    make_tenant(settings, "alice", "tok-alice")
    server = ServerProcess(settings)
    server.start(timeout_s=120)
    image = Site(tmp_path / "camera").stream(DeploymentSpec.model_validate(EDGE)).window(0)
    stop = threading.Event()
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=30, trust_env=False) as api:
            assert wait_until(lambda: api.get("/v1/nodes").status_code == 200, 120)
            emulated = {**EDGE, "name": "old", "target": {"kind": "edge-server"}}
            refused = api.post("/v1/deployments", json=emulated)
            assert refused.status_code == 422 and "target.live: true" in refused.text
            gone = {**EDGE, "name": "gone", "target": {**EDGE["target"], "nodes": ["n9"]}}
            refused = api.post("/v1/deployments", json=gone)
            assert refused.status_code == 422 and refused.json()["unknown"] == ["n9"]

            created = api.post("/v1/deployments", json=EDGE)
            assert created.status_code == 201, created.text
            assert created.json()["spec"]["target"]["gpus"] == 1.0  # n2's one core
            deployment_id = created.json()["id"]
            key = api.post("/v1/deployments/gate-cam/keys").json()
            assert wait_until(lambda: _infer(key["endpoint"], key["key"], image.images[0]) != {},
                              WAIT_S, interval_s=1.0)  # fmt: skip
            before = _infer(key["endpoint"], key["key"], image.images[0])
            camera = threading.Thread(target=_camera, args=(settings.data_dir, deployment_id,
                                                            stop, EDGE), daemon=True)  # fmt: skip
            camera.start()

            def window() -> int:
                return int(api.get("/v1/deployments/gate-cam").json()["window"])

            # the update trains on the newest windows: ask once they all hold the camera's
            # samples (windows advance from creation, before the camera starts)
            began = window()
            assert wait_until(lambda: window() >= began + EDGE["update"]["recent_windows"] + 1,
                              WAIT_S)  # fmt: skip
            assert api.post("/v1/deployments/gate-cam/update").status_code == 202

            def events() -> list[dict[str, Any]]:
                return list(api.get("/v1/deployments/gate-cam/events").json()["events"])

            def settled() -> bool:
                return any(e["kind"] in {"allocation", "job-failed"} for e in events())

            assert wait_until(settled, WAIT_S), events()
            assert not [e for e in events() if e["kind"] == "job-failed"], events()
            decision = next(e for e in events() if e["kind"] == "allocation")
            submitted = next(e for e in events() if e["kind"] == "job-submitted")
            (own,) = [s for s in decision["detail"]["streams"] if s["stream_id"] == "gate-cam"]
            share = own["inference_gpus"]
            after: dict[str, Any] = {}

            def shared() -> bool:  # the replica long-polls the table with the new share
                after.update(_infer(key["endpoint"], key["key"], image.images[0]))
                return after.get("share") == share

            assert wait_until(shared, 60, interval_s=0.5), (after, decision)
    finally:
        stop.set()
        server.stop()

    ray_ids = {v.report.node_id: v.report.ray_node_id for v in registered_nodes()}
    assert before["node"] == "n2" and before["ray_node"] == ray_ids["n2"]
    assert before["share"] is None  # no window yet: the serving section's own shape
    assert after["node"] == "n2" and after["ray_node"] == ray_ids["n2"]
    assert after["threads"] == max(1, round(share))  # a CPU node: the share is threads
    assert submitted["detail"]["live"] and submitted["detail"]["nodes"] == ["n2"]
    assert submitted["detail"]["gpus"] == 1.0  # planned on n2's own resources
    assert decision["detail"]["server"] == "n2"
    actors = _ray_actor_nodes()  # the window's actors ran on the edge server, nowhere else
    assert actors["InferenceJob"] and set(actors["InferenceJob"]) == {ray_ids["n2"]}
    assert set(actors.get("RetrainingJob", [])) <= {ray_ids["n2"]}
