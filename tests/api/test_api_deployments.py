"""The deployment and model-registry endpoints, end to end in one process (the control
loop runs in the app's manager): create, watch, register a version, roll back, stop."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from tests.api._api_helpers import ALICE, BOB

from _support import wait_until

SPEC: dict[str, Any] = {
    "name": "cam-1",
    "labeller": "ground-truth",
    "window_s": 3600,  # one window during the test: the loop is driven by hand below
    "stream": {"window_size": 100},
    "canary": {"windows": 0},
}


def wait_for(client: TestClient, path: str, done: Any, timeout_s: float = 120.0) -> Any:
    last: list[Any] = [None]

    def reached() -> bool:
        last[0] = client.get(path, headers=ALICE).json()
        return bool(done(last[0]))

    wait_until(reached, timeout_s, interval_s=0.1)  # the caller asserts on the body
    return last[0]


def test_deployment_lifecycle_through_the_api(client: TestClient) -> None:
    created = client.post("/v1/deployments", json=SPEC, headers=ALICE)
    assert created.status_code == 201, created.text
    assert created.json()["status"] == "UPDATING"
    assert client.post("/v1/deployments", json=SPEC, headers=ALICE).status_code == 200
    other = {**SPEC, "window_s": 60}
    assert client.post("/v1/deployments", json=other, headers=ALICE).status_code == 409
    assert client.get("/v1/deployments/cam-1", headers=BOB).status_code == 404
    assert client.get("/v1/deployments", headers=BOB).json() == {"deployments": []}

    view = wait_for(client, "/v1/deployments/cam-1", lambda b: b["window"] >= 0)
    assert view["serving_version"] == 1 and view["status"] == "ACTIVE"
    assert view["windows"][0]["served_version"] == 1
    assert 0.0 <= view["windows"][0]["accuracy"] <= 1.0
    assert [e["kind"] for e in view["events"]][:3] == ["created", "version-registered", "promoted"]

    # A model trained elsewhere (here: untrained weights), its gate skipped by the operator.
    listing = client.get("/v1/deployments/cam-1/versions", headers=ALICE).json()
    assert [v["status"] for v in listing["versions"]] == ["SERVING"]
    size = 4 * 10  # wrong size first
    bad = {"weights_b64": base64.b64encode(np.zeros(size, "<f4").tobytes()).decode()}
    assert client.post("/v1/deployments/cam-1/versions", json=bad, headers=ALICE).status_code == 422
    n_weights = _weights_of_v1(client)
    upload = {
        "weights_b64": base64.b64encode(
            np.random.default_rng(0).normal(0, 0.1, n_weights).astype("<f4").tobytes()
        ).decode(),
        "skip_gate": True,
        "note": "trained elsewhere",
    }
    answer = client.post("/v1/deployments/cam-1/versions", json=upload, headers=ALICE)
    assert answer.status_code == 201, answer.text
    assert answer.json()["version"] == 2 and answer.json()["parent_version"] == 1
    view = wait_for(client, "/v1/deployments/cam-1", lambda b: b["serving_version"] == 2)
    assert view["serving_version"] == 2

    # Manual rollback puts v1 back; rolling back again has nothing to go back to.
    back = client.post("/v1/deployments/cam-1/rollback", json={"reason": "test"}, headers=ALICE)
    assert back.status_code == 202, back.text
    assert back.json()["serving_version"] == 1
    again = client.post("/v1/deployments/cam-1/rollback", headers=ALICE)
    assert again.status_code == 409
    versions = client.get("/v1/models/versions?deployment=cam-1", headers=ALICE).json()
    assert [v["status"] for v in versions["versions"]] == ["SERVING", "ROLLED_BACK"]
    assert client.get("/v1/models/versions", headers=BOB).json()["versions"] == []

    requested = client.post("/v1/deployments/cam-1/update", headers=ALICE)
    assert requested.status_code == 202
    events = client.get("/v1/deployments/cam-1/events", headers=ALICE).json()["events"]
    assert events[-1]["kind"] == "update-requested"
    nodes = client.get("/v1/nodes", headers=ALICE).json()["nodes"]
    assert {n["name"] for n in nodes} >= {"tx2-1", "nano-1", "pi4-ps"}
    on = {n["name"]: n["deployments"] for n in nodes}
    assert all("cam-1" in on[name] for name in ("tx2-1", "nano-1", "nano-2", "nano-3", "pi4-ps"))
    assert on["edge-1"] == []  # served across the nodes, not on the edge server
    assert client.get("/v1/nodes", headers=BOB).json()["nodes"][0]["deployments"] == []

    stopped = client.delete("/v1/deployments/cam-1", headers=ALICE)
    assert stopped.status_code == 200 and stopped.json()["status"] == "STOPPED"
    assert client.post("/v1/deployments/cam-1/update", headers=ALICE).status_code == 409


def _weights_of_v1(client: TestClient) -> int:
    state = client.app.state.service  # type: ignore[attr-defined]
    from deepedge.service.artifacts import artifact_path
    from deepedge.service.deployments import DeploymentStore

    registry = DeploymentStore(state.store)
    record = registry.of_tenant(registry.get_by_id(_id(client)).tenant_id)[0]
    return int(np.load(artifact_path(state.settings.data_dir, record, 1)).shape[0])


def _id(client: TestClient) -> str:
    return str(client.get("/v1/deployments/cam-1", headers=ALICE).json()["id"])


def test_an_edge_server_deployment_shows_its_ekya_allocation_on_the_edge_server(
    client: TestClient,
) -> None:
    """The newest Ekya window's decision (the control plane's allocation event, decoded from
    an ``ekya-window`` job's result) is what /v1/nodes shows on the edge server."""
    from deepedge.core.errors import ConflictError
    from deepedge.service.deployment_records import DeploymentId, ModelVersion
    from deepedge.service.deployments import DeploymentStore, Step
    from deepedge.service.records import JobId
    from deepedge.service.rollout_status import VersionStatus
    from deepedge.service.update_jobs import ekya_allocation

    edge = {**SPEC, "name": "edge-cam", "target": {"kind": "edge-server", "gpus": 2},
            "update": {"policy": "ekya-window"}}  # fmt: skip
    assert client.post("/v1/deployments", json=edge, headers=ALICE).status_code == 201
    registry = DeploymentStore(client.app.state.service.store)  # type: ignore[attr-defined]
    ident = client.get("/v1/deployments/edge-cam", headers=ALICE).json()["id"]
    record = registry.get_by_id(DeploymentId(ident))
    decision = {"stream_id": "edge-cam", "inference_config": "r500", "inference_gpus": 0.4,
                "retraining_config": "e4-f100-z0", "retraining_gpus": 1.6,
                "window_accuracy": 0.8}  # fmt: skip
    result = {"scheduler": "thief", "retrained": "e4-f100-z0", "configs": [],
              "plans": [{"gpus": 2.0, "window_s": 30.0, "streams": [decision]}]}  # fmt: skip
    version = ModelVersion(record.id, 2, 1, None, VersionStatus.TRAINING, JobId("j" * 32),
                           (3, 4), {}, "", 0, 0.0, 0.0)  # fmt: skip
    event = ekya_allocation("edge-cam", "edge-1", version, result)
    assert event is not None and "1.60 for retraining (e4-f100-z0)" in event.message
    for _ in range(20):  # the control loop commits beside us: compare-and-set, retried
        try:
            registry.commit(registry.get_by_id(record.id), Step(events=(event,)))
            break
        except ConflictError:
            time.sleep(0.1)
    nodes = {n["name"]: n for n in client.get("/v1/nodes", headers=ALICE).json()["nodes"]}
    assert nodes["edge-1"]["role"] == "edge-server"
    assert nodes["edge-1"]["deployments"] == ["edge-cam"]
    assert "edge-cam" not in nodes["pi4-ps"]["deployments"]
    (allocation,) = nodes["edge-1"]["allocations"]
    assert allocation["policy"] == "ekya-window" and allocation["window"] == 4
    assert allocation["inference_gpus"] == 0.4 and allocation["retraining_gpus"] == 1.6
    assert allocation["retraining_config"] == "e4-f100-z0" and allocation["gpus"] == 2.0
    bob = {n["name"]: n for n in client.get("/v1/nodes", headers=BOB).json()["nodes"]}
    assert bob["edge-1"]["deployments"] == [] and bob["edge-1"]["allocations"] == []
    stopped = client.delete("/v1/deployments/edge-cam", headers=ALICE)
    assert stopped.status_code == 200 and stopped.json()["status"] == "STOPPED"


def test_a_users_workload_is_checked_before_the_deployment_is_created(
    client: TestClient, user_workload: Callable[..., Path]
) -> None:
    """Its model built and its data read in a child process: 422 naming the field."""
    broken = user_workload(model={"entry_point": "mysite.models:not_a_model"})
    bad = {**SPEC, "name": "site-cams", "workload": str(broken)}
    refused = client.post("/v1/deployments", json=bad, headers=ALICE)
    assert refused.status_code == 422, refused.text
    assert "workload" in refused.text and "model" in refused.text
    assert client.get("/v1/deployments", headers=ALICE).json() == {"deployments": []}
    good = user_workload(model={"entry_point": "mysite.models:make",
                                "kwargs": {"classes": 2, "channels": 3}})  # fmt: skip
    created = client.post("/v1/deployments", json={**bad, "workload": str(good)}, headers=ALICE)
    assert created.status_code == 201, created.text
    assert created.json()["workload"] == str(good)
    assert client.delete("/v1/deployments/site-cams", headers=ALICE).status_code == 200
