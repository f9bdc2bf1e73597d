"""The REST API: auth, tenant isolation on every endpoint, quotas, validation, streaming."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from _api_helpers import ALICE, BOB, operator
from fastapi.testclient import TestClient

from _support import wait_until

SLEEPER = {"name": "sleeper", "kind": "command", "resources": {"cpus": 0.5},
           "spec": {"argv": [sys.executable, "-m", "deepedge.service.demo_learner",
                             "--steps", "1000", "--step-s", "0.05"]}}  # fmt: skip
QUICK = {"name": "quick", "kind": "command", "resources": {"cpus": 0.5},
         "spec": {"argv": [sys.executable, "-m", "deepedge.service.demo_learner",
                           "--steps", "3", "--step-s", "0.02"]}}  # fmt: skip


def _wait_status(client: TestClient, job_id: str, wanted: set[str], timeout_s: float = 60) -> str:
    seen = [""]

    def reached() -> bool:
        seen[0] = client.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"]
        return seen[0] in wanted

    assert wait_until(reached, timeout_s), f"job stayed {seen[0]}, wanted {wanted}"
    return seen[0]


ENDPOINTS = [
    ("GET", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs/{id}/logs"),
    ("GET", "/v1/jobs/{id}/metrics"),
    ("POST", "/v1/jobs/{id}/checkpoint"),
    ("POST", "/v1/jobs/{id}/halt"),
    ("POST", "/v1/jobs/{id}/resume"),
    ("DELETE", "/v1/jobs/{id}"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_another_tenants_job_is_not_found_on_every_endpoint(
    client: TestClient, method: str, path: str
) -> None:
    job_id = client.post("/v1/jobs", json=QUICK, headers=ALICE).json()["id"]
    theirs = client.request(method, path.format(id=job_id), headers=BOB)
    missing = client.request(method, path.format(id="0" * 32), headers=BOB)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"] == "not_found"
    assert job_id not in [j["id"] for j in client.get("/v1/jobs", headers=BOB).json()["jobs"]]
    assert client.get(f"/v1/jobs/{job_id}", headers=ALICE).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"), [*ENDPOINTS, ("GET", "/v1/jobs"), ("POST", "/v1/jobs")]
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
def test_every_job_endpoint_needs_a_valid_token(
    client: TestClient, method: str, path: str, headers: dict[str, str]
) -> None:
    response = client.request(method, path.format(id="0" * 32), headers=headers,
                              json=QUICK if method == "POST" else None)  # fmt: skip
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    ("document", "status", "field"),
    [
        ({**QUICK, "spec": {"argv": ["x"], "cwd": "../../etc"}}, 422, "spec.cwd"),
        ({**QUICK, "data": {"source": "/etc/passwd"}}, 422, "data.source"),
        ({**QUICK, "learners": 0}, 422, "learners"),
        ({**QUICK, "resources": {"cpus": 4}}, 429, "resources"),
        ({"kind": "command"}, 422, "name"),
        (
            {"name": "m", "kind": "model-update", "spec": {"document": {"epochs": 0}}},
            422,
            "spec.document.epochs",
        ),
    ],
)
def test_bad_submissions_are_4xx_naming_the_field(
    client: TestClient, document: dict[str, Any], status: int, field: str
) -> None:
    response = client.post("/v1/jobs", json=document, headers=ALICE)
    assert response.status_code == status
    body = response.json()
    assert body.get("field") == field
    assert field.split(".")[0] in body["message"] or status == 429


def test_malformed_json_is_422(client: TestClient) -> None:
    response = client.post("/v1/jobs", content=b"{nope", headers={**ALICE,
                           "content-type": "application/json"})  # fmt: skip
    assert response.status_code == 422 and response.json()["field"] == "<body>"


def test_unfinished_job_quota_is_429(client: TestClient) -> None:
    statuses = [client.post("/v1/jobs", json=SLEEPER | {"name": f"s{i}"}, headers=ALICE).status_code
                for i in range(6)]  # fmt: skip
    assert statuses == [201] * 5 + [429]
    for job in client.get("/v1/jobs", headers=ALICE).json()["jobs"]:
        client.post(f"/v1/jobs/{job['id']}/halt", headers=ALICE)
    for job in client.get("/v1/jobs", headers=ALICE).json()["jobs"]:
        _wait_status(client, job["id"], {"HALTED"})


def test_idempotent_submit(client: TestClient) -> None:
    first = client.post("/v1/jobs", json=QUICK, headers={**ALICE, "Idempotency-Key": "k1"})
    again = client.post("/v1/jobs", json=QUICK, headers={**ALICE, "Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


def test_lifecycle_logs_follow_metrics_and_delete(client: TestClient) -> None:
    job_id = client.post("/v1/jobs", json=QUICK, headers=ALICE).json()["id"]
    with client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"},
                       headers=ALICE) as response:  # fmt: skip
        streamed = "".join(response.iter_text())
    assert "done after 3 steps" in streamed and "exit code 0" in streamed
    assert _wait_status(client, job_id, {"COMPLETED"}) == "COMPLETED"
    view = client.get(f"/v1/jobs/{job_id}", headers=ALICE).json()
    assert [h["status"] for h in view["history"]][-1] == "COMPLETED"
    assert all(h["at"] > 0 for h in view["history"])
    samples = client.get(f"/v1/jobs/{job_id}/metrics", headers=ALICE).json()["samples"]
    assert [s["step"] for s in samples] == [1, 2, 3]
    plain = client.get(f"/v1/jobs/{job_id}/logs", params={"offset": 5}, headers=ALICE)
    assert int(plain.headers["X-Next-Offset"]) == 5 + len(plain.content)
    assert client.post(f"/v1/jobs/{job_id}/halt", headers=ALICE).status_code == 409
    assert client.delete(f"/v1/jobs/{job_id}", headers=ALICE).status_code == 204
    assert client.get(f"/v1/jobs/{job_id}", headers=ALICE).status_code == 404


def test_halt_resume_and_illegal_requests(client: TestClient) -> None:
    # Long enough that it cannot finish before the halt on a slow machine; the test halts it.
    argv = [*SLEEPER["spec"]["argv"][:-4], "--steps", "100000", "--step-s", "0.05"]
    long_sleeper = SLEEPER | {"spec": {"argv": argv}}
    job_id = client.post("/v1/jobs", json=long_sleeper, headers=ALICE).json()["id"]
    _wait_status(client, job_id, {"PROCESSING"})
    assert client.post(f"/v1/jobs/{job_id}/resume", headers=ALICE).status_code == 409
    assert client.delete(f"/v1/jobs/{job_id}", headers=ALICE).status_code == 409
    assert client.post(f"/v1/jobs/{job_id}/checkpoint", headers=ALICE).status_code == 202
    assert client.post(f"/v1/jobs/{job_id}/halt", headers=ALICE).status_code == 202
    _wait_status(client, job_id, {"HALTED"})
    assert client.post(f"/v1/jobs/{job_id}/resume", headers=ALICE).json()["status"] == "QUEUED"
    _wait_status(client, job_id, {"PROCESSING"})
    client.post(f"/v1/jobs/{job_id}/halt", headers=ALICE)
    _wait_status(client, job_id, {"HALTED"})


def test_openapi_and_prometheus_metrics(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/logs"} <= set(spec["paths"])
    client.post("/v1/jobs", json=QUICK, headers=ALICE)
    text = client.get("/metrics", headers=operator(client)).text
    assert 'deepedge_jobs{status="QUEUED"}' in text or 'deepedge_jobs{status="PENDING"}' in text
    assert "deepedge_api_request_seconds_bucket" in text
    assert 'route="/v1/jobs"' in text
    assert 'deepedge_recovery_events_total{event="learner_restarted"}' in text
