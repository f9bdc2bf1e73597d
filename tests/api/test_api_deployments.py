"""The deployment and model-registry endpoints, end to end in one process (the control
loop runs in the app's manager): create, watch, register a version, roll back, stop."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _api_helpers import ALICE, BOB, operator
from _site_history import DRIFT_LAST_SCORED, DRIFT_WINDOWS, seed_drift
from fastapi.testclient import TestClient

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
    assert view["serving_version"] == 1 and view["status"] == "ACTIVE", view
    assert view["windows"][0]["served_version"] == 1
    # No camera sends requests here (no data plane in this test): nothing to score yet.
    assert view["windows"][0]["accuracy"] is None and view["windows"][0]["samples"] == 0
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

    # The stored model downloads whole and loads back as it serves.
    download = client.get("/v1/deployments/cam-1/versions/1/model", headers=ALICE)
    assert download.status_code == 200 and download.headers["x-model-format"] == "state-dict"
    assert client.get("/v1/deployments/cam-1/versions/9/model", headers=ALICE).status_code == 404
    assert client.get("/v1/deployments/cam-1/versions/1/model", headers=BOB).status_code == 404
    _round_trips(client, download.content)

    stopped = client.post("/v1/deployments/cam-1/stop", headers=ALICE)
    assert stopped.status_code == 200 and stopped.json()["status"] == "STOPPED"
    assert client.post("/v1/deployments/cam-1/update", headers=ALICE).status_code == 409

    # Deleted only when the caller repeats its name; its versions and files go with it, and
    # the name takes a changed spec at once.
    folder = _folder(client)
    assert any(folder.glob("v*.pt"))
    for confirm in ("", "?confirm=cam-2"):
        refused = client.delete(f"/v1/deployments/cam-1{confirm}", headers=ALICE)
        assert refused.status_code == 422 and "confirm" in refused.text
    assert client.delete("/v1/deployments/cam-1?confirm=cam-1", headers=BOB).status_code == 404
    gone = client.delete("/v1/deployments/cam-1?confirm=cam-1", headers=ALICE)
    assert gone.status_code == 200, gone.text
    assert client.get("/v1/deployments/cam-1", headers=ALICE).status_code == 404
    assert client.get("/v1/models/versions", headers=ALICE).json()["versions"] == []
    assert not folder.exists()
    again = client.post("/v1/deployments", json=other, headers=ALICE)
    assert again.status_code == 201 and again.json()["spec"]["window_s"] == 60
    assert [v["status"] for v in again.json()["versions"]] == ["TRAINING"]


def test_inference_keys_are_created_listed_and_revoked_per_deployment(
    client: TestClient,
) -> None:
    assert client.post("/v1/deployments", json=SPEC, headers=ALICE).status_code == 201
    made = client.post("/v1/deployments/cam-1/keys", json={"name": "gate-cam"}, headers=ALICE)
    assert made.status_code == 201, made.text
    key = made.json()
    assert key["key"].startswith("dpk_") and key["key"].startswith(key["prefix"])
    assert key["model"] == "alice.cam-1" and key["endpoint"].endswith("/v2/models/alice.cam-1")
    listed = client.get("/v1/deployments/cam-1/keys", headers=ALICE).json()["keys"]
    assert [(k["id"], k["active"]) for k in listed] == [(key["id"], True)]
    assert "key" not in listed[0]  # the secret is shown once only
    assert client.get("/v1/deployments/cam-1/keys", headers=BOB).status_code == 404
    assert client.delete(f"/v1/deployments/cam-1/keys/{key['id']}", headers=BOB).status_code == 404
    revoked = client.delete(f"/v1/deployments/cam-1/keys/{key['prefix']}", headers=ALICE)
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert client.delete("/v1/deployments/cam-1/keys/nope", headers=ALICE).status_code == 404
    traffic = client.get("/v1/deployments/cam-1/traffic", headers=ALICE).json()
    assert traffic["model"] == "alice.cam-1" and traffic["data_plane"] is False
    assert traffic["data_plane_health"]["state"] == "off"
    assert traffic["traffic"]["requests"] == 0 and traffic["samples"]["stored"] == 0
    # No ingress ran: its latency is not shown as a number, and the answer says why.
    latency = traffic["traffic"]["latency_ms"]
    proxy, replica = latency["proxy"], latency["replica"]
    assert proxy["state"] == "unavailable" and proxy["p50"] is None and proxy["reason"]
    assert "ingress" in proxy["measured"] and "replica" in replica["measured"]
    assert replica["requests"] == 0 and replica["p50"] is None
    assert client.get("/v1/deployments/cam-1/traffic", headers=BOB).status_code == 404
    # A deployment that ever had a key (revoked here) is deleted with its keys.
    client.post("/v1/deployments/cam-1/keys", json={"name": "door-cam"}, headers=ALICE)
    gone = client.delete("/v1/deployments/cam-1?confirm=cam-1", headers=ALICE)
    assert gone.status_code == 200, gone.text
    assert (gone.json()["deleted_keys"], gone.json()["deleted_samples"]) == (2, 0)
    again = client.post("/v1/deployments", json=SPEC, headers=ALICE)
    assert again.status_code == 201
    assert client.get("/v1/deployments/cam-1/keys", headers=ALICE).json()["keys"] == []


def test_a_full_sample_store_says_so_in_the_metrics(client: TestClient) -> None:
    """Retention evicts the oldest samples; /traffic and /metrics count what it evicted."""
    import numpy as np

    from deepedge.dataplane.routing import RouteKind
    from deepedge.dataplane.sample_store import Retention, Sample, SampleStore, sample_store_path

    deployment = client.post("/v1/deployments", json=SPEC, headers=ALICE).json()
    state = client.app.state.service  # type: ignore[attr-defined]
    store = SampleStore(sample_store_path(state.settings.data_dir))
    now = time.time()
    store.append(deployment["id"], [
        Sample(f"r{i}", now, 1, RouteKind.SERVING, 0, np.zeros((1, 16, 16), np.float32))
        for i in range(12)
    ], Retention(max_samples=10), now=now)  # fmt: skip
    samples = client.get("/v1/deployments/cam-1/traffic", headers=ALICE).json()["samples"]
    assert samples == {"stored": 10, "bytes": 10 * 1024, "appended": 12, "evicted": 2}
    text = client.get("/metrics", headers=operator(client)).text
    assert f'deepedge_samples_evicted_total{{deployment="{deployment["id"]}"}} 2.0' in text
    assert f'deepedge_samples_stored{{deployment="{deployment["id"]}"}} 10.0' in text


def _round_trips(client: TestClient, body: bytes) -> None:
    import io

    import torch

    from deepedge.controlplane.artifacts import artifact_path, load_version
    from deepedge.learning.models import make_edge_model

    model = make_edge_model(10, 16, 8)
    model.load_state_dict(torch.load(io.BytesIO(body), weights_only=True))
    state = client.app.state.service  # type: ignore[attr-defined]
    folder = _folder(client)
    record_spec = client.get("/v1/deployments/cam-1", headers=ALICE).json()["spec"]
    from deepedge.controlplane.deployment_spec import DeploymentSpec

    stored = load_version(DeploymentSpec.model_validate(record_spec), folder / "v1.pt")
    x = torch.rand(4, 1, 16, 16)
    assert torch.equal(model.eval()(x), stored(x))
    assert artifact_path(state.settings.data_dir, _record(client), 1) == folder / "v1.pt"


def _record(client: TestClient) -> Any:
    state = client.app.state.service  # type: ignore[attr-defined]
    from deepedge.controlplane.deployments import DeploymentStore

    registry = DeploymentStore(state.store)
    return registry.of_tenant(registry.get_by_id(_id(client)).tenant_id)[0]


def _folder(client: TestClient) -> Path:
    state = client.app.state.service  # type: ignore[attr-defined]
    from deepedge.controlplane.artifacts import deployment_dir
    from deepedge.controlplane.deployments import DeploymentStore

    registry = DeploymentStore(state.store)
    record = registry.of_tenant(registry.get_by_id(_id(client)).tenant_id)[0]
    return deployment_dir(state.settings.data_dir, record)


def _weights_of_v1(client: TestClient) -> int:
    state = client.app.state.service  # type: ignore[attr-defined]
    from deepedge.controlplane.artifacts import artifact_path, file_shapes
    from deepedge.controlplane.deployments import DeploymentStore

    registry = DeploymentStore(state.store)
    record = registry.of_tenant(registry.get_by_id(_id(client)).tenant_id)[0]
    shapes = file_shapes(artifact_path(state.settings.data_dir, record, 1))
    return sum(int(np.prod(shape)) for shape in shapes.values())


def _id(client: TestClient) -> str:
    return str(client.get("/v1/deployments/cam-1", headers=ALICE).json()["id"])


def test_an_edge_servers_joint_window_shows_each_deployments_share_on_the_edge_server(
    client: TestClient,
) -> None:
    """Two deployments on edge-1 share one Ekya window: each one's allocation event is
    decoded from the same joint result (one retrained, one inference only), and /v1/nodes
    shows on edge-1 each deployment's own shares, which sum to at most the server's GPUs.
    A third deployment declaring other GPUs for edge-1, or another tenant's, is refused."""
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.records import DeploymentId
    from deepedge.controlplane.update_jobs import ekya_allocation
    from deepedge.core.errors import ConflictError

    registry = DeploymentStore(client.app.state.service.store)  # type: ignore[attr-defined]
    edge = {**SPEC, "target": {"kind": "edge-server", "gpus": 2},
            "update": {"policy": "ekya-window"}}  # fmt: skip
    for name in ("edge-cam", "edge-door"):
        assert client.post("/v1/deployments", json={**edge, "name": name},
                           headers=ALICE).status_code == 201  # fmt: skip
    other_gpus = {**edge, "name": "edge-gate", "target": {"kind": "edge-server", "gpus": 4}}
    refused = client.post("/v1/deployments", json=other_gpus, headers=ALICE)
    assert refused.status_code == 409 and "GPU" in refused.json()["message"]
    bobs = client.post("/v1/deployments", json={**edge, "name": "bob-cam"}, headers=BOB)
    assert bobs.status_code == 409 and "another tenant" in bobs.json()["message"]
    streams = [
        {"stream_id": "edge-cam", "inference_config": "r500", "inference_gpus": 0.4,
         "retraining_config": "e4-f100-z0", "retraining_gpus": 1.0, "window_accuracy": 0.8},
        {"stream_id": "edge-door", "inference_config": "r250", "inference_gpus": 0.3,
         "retraining_config": None, "retraining_gpus": 0.0, "window_accuracy": 0.7},
    ]  # fmt: skip
    result = {"scheduler": "thief", "edge_server": "edge-1", "gpus": 2.0,
              "plans": [{"gpus": 2.0, "window_s": 30.0, "streams": streams}],
              "streams": {"edge-cam": {"retrained": "e4-f100-z0", "configs": []}}}  # fmt: skip
    events = {
        "edge-cam": ekya_allocation("edge-cam", "edge-1", 2, 4, "j" * 32, result),
        "edge-door": ekya_allocation("edge-door", "edge-1", 1, 6, "j" * 32, result),
    }
    cam, door = events["edge-cam"], events["edge-door"]
    assert cam is not None and "1.00 for retraining (e4-f100-z0)" in cam.message
    assert door is not None and door.detail["inference_only"] and "inference only" in door.message
    assert cam.detail["allocated_gpus"] == door.detail["allocated_gpus"] == 1.7
    for name, event in events.items():
        ident = client.get(f"/v1/deployments/{name}", headers=ALICE).json()["id"]
        for _ in range(20):  # the control loop commits beside us: compare-and-set, retried
            try:
                record = registry.get_by_id(DeploymentId(ident))
                registry.commit(record, Step(events=(event,)))
                break
            except ConflictError:
                time.sleep(0.1)
    nodes = {n["name"]: n for n in client.get("/v1/nodes", headers=ALICE).json()["nodes"]}
    assert nodes["edge-1"]["role"] == "edge-server"
    assert nodes["edge-1"]["deployments"] == ["edge-cam", "edge-door"]
    assert "edge-cam" not in nodes["pi4-ps"]["deployments"]
    held = {a["deployment"]: a for a in nodes["edge-1"]["allocations"]}
    assert sorted(held) == ["edge-cam", "edge-door"]  # each its own stream, once
    assert held["edge-cam"]["window"] == 4 and held["edge-door"]["window"] == 6
    assert held["edge-cam"]["retraining_gpus"] == 1.0 and held["edge-door"]["retraining_gpus"] == 0
    assert held["edge-cam"]["retraining_config"] == "e4-f100-z0"
    total = sum(a["inference_gpus"] + a["retraining_gpus"] for a in held.values())
    assert total <= held["edge-cam"]["gpus"] == 2.0
    bob = {n["name"]: n for n in client.get("/v1/nodes", headers=BOB).json()["nodes"]}
    assert bob["edge-1"]["deployments"] == [] and bob["edge-1"]["allocations"] == []
    for name in ("edge-cam", "edge-door"):
        stopped = client.post(f"/v1/deployments/{name}/stop", headers=ALICE)
        assert stopped.status_code == 200 and stopped.json()["status"] == "STOPPED"
    # Once alice's deployments are stopped, edge-1 is free for bob's.
    assert client.post("/v1/deployments", json={**edge, "name": "bob-cam"},
                       headers=BOB).status_code == 201  # fmt: skip


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
    assert client.post("/v1/deployments/site-cams/stop", headers=ALICE).status_code == 200
    # What the check warns about is said where the deployment starts.
    odd = user_workload(input={"size": [12, 12], "channels": 3, "mean": [0.5], "std": [0.001]})
    warned = client.post("/v1/deployments", json={**bad, "name": "odd", "workload": str(odd)},
                         headers=ALICE)  # fmt: skip
    assert warned.status_code == 201, warned.text
    (event,) = [e for e in warned.json()["events"] if e["kind"] == "created"]
    assert "the workload check warned: input: normalised with" in event["message"]


def test_the_service_keeps_its_tenants_data_to_its_own_user(client: TestClient) -> None:
    """Started, the service's tenant-data folders are 0700 and its SQLite store 0600."""
    data_dir = client.app.state.service.settings.data_dir  # type: ignore[attr-defined]
    modes = {name: (data_dir / name).stat().st_mode & 0o777
             for name in ("deployments", "samples", "serving", "service.db")}  # fmt: skip
    assert modes == {"deployments": 0o700, "samples": 0o700, "serving": 0o700,
                     "service.db": 0o600}  # fmt: skip


def test_a_summary_keeps_the_last_scored_accuracy_past_a_window_without_samples(
    client: TestClient,
) -> None:
    service = client.app.state.service  # type: ignore[attr-defined]
    seed_drift(service.settings.url, service.store.tenant_by_token("token-alice").id)
    listing = client.get("/v1/deployments", headers=ALICE).json()["deployments"]
    summaries = {d["name"]: d for d in listing}
    drift = summaries["drift-cam"]
    assert drift["last_accuracy"] is None  # its newest window had no labelled sample
    windows = client.get("/v1/deployments/drift-cam/windows", headers=ALICE).json()["windows"]
    scored = windows[DRIFT_WINDOWS - 2]
    assert windows[-1]["samples"] == 0 and scored["accuracy"] == DRIFT_LAST_SCORED
    last = (drift["last_scored_window"], drift["last_scored_accuracy"], drift["last_scored_at"])
    assert last == (DRIFT_WINDOWS - 2, DRIFT_LAST_SCORED, scored["at"])
    # Each served version beside the one it replaced, where scored.
    assert (scored["previous_version"], scored["previous_accuracy"]) == (2, 0.88)
    old = summaries["old-cam"]
    assert (old["status"], old["last_accuracy"], old["last_scored_window"]) == ("STOPPED", 0.5, 0)
    # The same fields on the deployment's own document; another tenant sees none of it.
    view = client.get("/v1/deployments/drift-cam", headers=ALICE).json()
    assert {k: view[k] for k in drift} == drift
    assert client.get("/v1/deployments", headers=BOB).json() == {"deployments": []}
    assert client.get("/v1/deployments/drift-cam", headers=BOB).status_code == 404
