"""The API's side of keeping tenants apart: metrics behind the operator's token, the Host
header, token revocation, idempotency keys, bounded inputs, links in job folders, the
OpenAPI document, and tenant code kept out of the API process."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _api_helpers import ALICE, BOB, operator
from fastapi.testclient import TestClient

from _support import wait_until

QUICK = {"name": "quick", "kind": "command", "spec": {"argv": ["true"]}}


def _data_dir(client: TestClient) -> Path:
    return Path(client.app.state.service.settings.data_dir)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("who", "status"), [("none", 401), ("tenant", 403), ("operator", 200)])
def test_metrics_count_every_tenant_so_they_need_the_operators_token(
    client: TestClient, who: str, status: int
) -> None:
    headers = {"none": {}, "tenant": ALICE, "operator": operator(client)}[who]
    response = client.get("/metrics", headers=headers)
    assert response.status_code == status
    assert ("deepedge_jobs" in response.text) is (status == 200)


@pytest.mark.parametrize(
    ("host", "status"),
    [("localhost", 200), ("127.0.0.1:8750", 200), ("[::1]:8750", 200),
     ("evil.example", 400), ("localhost.evil.example:8750", 400)],
)  # fmt: skip
def test_the_host_header_must_name_the_service(client: TestClient, host: str, status: int) -> None:
    response = client.get("/v1/jobs", headers={**ALICE, "Host": host})
    assert response.status_code == status
    if status == 400:
        assert response.json()["field"] == "Host"


def test_a_revoked_token_is_refused_at_once(client: TestClient) -> None:
    minted = client.post("/v1/tokens", json={"label": "ci"}, headers=ALICE)
    assert minted.status_code == 201
    secret, token_id = minted.json()["token"], minted.json()["id"]
    mine = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/jobs", headers=mine).status_code == 200
    listed = client.get("/v1/tokens", headers=ALICE).json()["tokens"]
    assert token_id in {t["id"] for t in listed} and all("token" not in t for t in listed)
    assert client.delete(f"/v1/tokens/{token_id}", headers=BOB).status_code == 404
    revoked = client.delete(f"/v1/tokens/{token_id}", headers=ALICE)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.get("/v1/jobs", headers=mine).status_code == 401  # the very next request
    assert client.get("/v1/jobs", headers=ALICE).status_code == 200  # the others stay


def test_a_jobs_token_may_not_mint_tokens(client: TestClient) -> None:
    from deepedge.service.tenants import TokenRole

    store = client.app.state.service.store  # type: ignore[attr-defined]
    alice = store.tenant_by_token("token-alice")
    _, secret = store.tenancy.create_token(
        TokenRole.JOB, tenant_id=alice.id, label="j", job_id="j1"
    )
    job = {"Authorization": f"Bearer {secret}"}
    assert client.get("/v1/jobs", headers=job).status_code == 200  # acts as its tenant
    assert client.post("/v1/tokens", json={}, headers=job).status_code == 403
    assert client.get("/v1/tokens", headers=job).status_code == 403


def test_an_inference_key_made_with_a_jobs_token_ends_with_the_job(tmp_path: Path) -> None:
    """Through the API: a key made with a job's token names the job and ends with it. (The
    deployment is stopped before the app starts: its control loop then leaves it alone.)"""
    from deepedge.api.app import create_app
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.rollout_status import DeploymentStatus
    from deepedge.service.config import ServiceSettings
    from deepedge.service.manifest import parse_manifest
    from deepedge.service.status import JobStatus
    from deepedge.service.store import JobStore
    from deepedge.service.tenants import TokenRole

    settings = ServiceSettings(data_dir=tmp_path)
    store = JobStore(settings.url)
    store.migrate()
    alice = store.create_tenant("alice", "token-alice")
    registry = DeploymentStore(store)
    deployment, _ = registry.create(alice.id, DeploymentSpec(name="cam"))
    registry.commit(deployment, Step(deployment={"status": DeploymentStatus.STOPPED}))
    job, _ = store.submit(alice, parse_manifest(QUICK))
    _, secret = store.tenancy.create_token(
        TokenRole.JOB, tenant_id=alice.id, label="j", job_id=job.id
    )
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        made = client.post("/v1/deployments/cam/keys", json={"name": "from-a-job"},
                           headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
        assert made.status_code == 201 and made.json()["job_id"] == job.id
        client.post("/v1/deployments/cam/keys", json={"name": "alices"}, headers=ALICE)
        store.transition(job.id, JobStatus.FAILED, "test")
        keys = client.get("/v1/deployments/cam/keys", headers=ALICE).json()["keys"]
    assert {k["name"]: k["active"] for k in keys} == {"from-a-job": False, "alices": True}
    store.dispose()


def test_an_idempotency_key_reused_with_another_body_is_422(client: TestClient) -> None:
    key = {**ALICE, "Idempotency-Key": "k-1"}
    first = client.post("/v1/jobs", json=QUICK, headers=key)
    same = client.post("/v1/jobs", json=QUICK, headers=key)
    other = client.post("/v1/jobs", json={**QUICK, "name": "other"}, headers=key)
    assert (first.status_code, same.status_code, other.status_code) == (201, 200, 422)
    assert same.json()["id"] == first.json()["id"]
    assert other.json()["field"] == "Idempotency-Key"
    # the same key is another tenant's own
    assert client.post("/v1/jobs", json={**QUICK, "name": "b"},
                       headers={**BOB, "Idempotency-Key": "k-1"}).status_code == 201  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resources": {"cpu_time_s": 10**30}}, "resources.cpu_time_s"),
        ({"max_runtime_s": 1e300}, "max_runtime_s"),
        ({"resources": {"max_processes": 10**6}}, "resources.max_processes"),
        ({"spec": {"argv": ["true"], "env": {f"V{i}": "x" * 4000 for i in range(40)}}},
         "spec.env"),
        ({"spec": {"argv": ["true"], "env": {"A": "x" * 5000}}}, "spec.env.A"),
        ({"spec": {"argv": ["echo", *["x" * 4000] * 40]}}, "spec.argv"),
        ({"spec": {"argv": ["true"], "env": {"NOT A NAME": "1"}}}, "spec.env.NOT A NAME.[key]"),
    ],
)  # fmt: skip
def test_out_of_range_inputs_are_422_naming_the_field_not_accepted(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/jobs", json={**QUICK, **change}, headers=ALICE)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert client.get("/v1/jobs", headers=ALICE).json()["jobs"] == []


@pytest.mark.parametrize("target", ["/etc/passwd", "service.db"])
def test_a_result_that_is_a_link_is_refused_not_followed(client: TestClient, target: str) -> None:
    """Tenant code may leave a link where its result should be (to the store, to another
    tenant's files): the API answers 404 and never reads through it."""
    path = target if target.startswith("/") else str(_data_dir(client) / target)
    link = ("import os; results = os.environ['DEEPEDGE_RESULTS_DIR']; "
            f"os.symlink({path!r}, results + '/result.json')")  # fmt: skip
    job = {**QUICK, "spec": {"argv": [sys.executable, "-c", link]}}
    job_id = client.post("/v1/jobs", json=job, headers=ALICE).json()["id"]
    assert wait_until(lambda: client.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"]
                      in {"COMPLETED", "FAILED"}, 60)  # fmt: skip
    results = _data_dir(client) / "jobs"
    planted = next(results.glob(f"*/{job_id}/results/result.json"))
    assert planted.is_symlink()
    response = client.get(f"/v1/jobs/{job_id}/result", headers=ALICE)
    assert response.status_code == 404
    assert "root:" not in response.text and "SQLite" not in response.text


def test_every_tenant_route_declares_401_and_404_in_the_openapi_document(
    client: TestClient,
) -> None:
    spec = client.get("/openapi.json").json()
    checked = 0
    for path, operations in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for operation in operations.values():
            assert {"401", "404"} <= set(operation["responses"]), path
            checked += 1
    assert checked >= 20


def test_a_workloads_code_never_runs_in_the_api_process(
    client: TestClient, user_workload: Callable[..., Path], tmp_path: Path
) -> None:
    """An entry point that is a shell command (``os:system``) runs, if at all, in the
    tenant's sandbox: the file it would write next to the service's data is never there,
    and the API answers 422 naming the field."""
    planted = _data_dir(client) / "pwned"
    document = {"workload": str(user_workload(
        model={"entry_point": "os:system", "kwargs": {"command": f"touch {planted}"}}
    )), "epochs": 1}  # fmt: skip
    manifest = {"name": "m", "kind": "model-update", "spec": {"document": document}}
    response = client.post("/v1/jobs", json=manifest, headers=ALICE)
    assert response.status_code == 422
    assert response.json()["field"].startswith("spec.document.workload")
    time.sleep(0.2)
    assert not planted.exists()
