"""The dashboard page and its two read endpoints (``/v1/host``, ``/v1/jobs/{id}/result``)."""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from pathlib import Path

import pytest
from _api_helpers import ALICE, BOB
from fastapi.testclient import TestClient

from _support import wait_until
from deepedge.api.dashboard import DASHBOARD_PATH

# Writes a result document where the service keeps a job's results, then holds its cores
# until the file "release" appears in its working directory (at most 120 s: a test that
# fails before releasing it leaves no learner behind for long).
RESULT_WRITER = (
    "import json, os, pathlib, time\n"
    "out = pathlib.Path(os.environ['DEEPEDGE_RESULTS_DIR'])\n"
    "out.mkdir(parents=True, exist_ok=True)\n"
    "(out / 'result.json').write_text(json.dumps({'streams': [{'stream_id': 'cam-1'}]}))\n"
    "print('result written', flush=True)\n"
)
WRITER = RESULT_WRITER + (
    "deadline = time.monotonic() + 120\n"
    "while not pathlib.Path('release').exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
)
HOLDER = {"name": "holder", "kind": "command", "learners": 2,
          "resources": {"cpus": 0.5, "gpus": 0, "mem_mb": 1024},
          "spec": {"argv": [sys.executable, "-c", WRITER]}}  # fmt: skip


def _wait(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    assert wait_until(predicate, timeout_s), "condition not met in time"


def held_tenant(client: TestClient) -> str:
    """The id of alice's tenant (her jobs' folders are under it)."""
    tenant = client.app.state.service.store.tenant_by_token("token-alice")  # type: ignore[attr-defined]
    return str(tenant.id)


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_page_is_one_self_contained_response_whose_csp_admits_only_its_own_inline_code(
    client: TestClient,
) -> None:
    response = client.get(DASHBOARD_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    # Nothing to fetch before the page works: no external script, stylesheet or CDN.
    assert not re.search(r"<script[^>]+src=|<link[^>]+stylesheet|https?://(?!www\.w3\.org)", html)
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(scripts) == len(styles) == 1
    assert "function followLog" in scripts[0] and ".chart" in styles[0]
    csp = response.headers["content-security-policy"]
    assert f"script-src '{_sha256(scripts[0])}'" in csp
    assert f"style-src '{_sha256(styles[0])}'" in csp
    assert "connect-src 'self'" in csp and "default-src 'none'" in csp
    # The page itself is the same for everyone; data come only through the token.
    assert "token-alice" not in html and "alice" not in html
    again = client.get(DASHBOARD_PATH, headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("path", ["/v1/host", "/v1/jobs/" + "0" * 32 + "/result"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
def test_dashboard_endpoints_need_a_valid_token(
    client: TestClient, path: str, headers: dict[str, str]
) -> None:
    response = client.get(path, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"


def test_host_state_is_measured_and_allocations_are_the_callers_only(
    client: TestClient, tmp_path: Path
) -> None:
    job = client.post("/v1/jobs", json=HOLDER, headers=ALICE).json()
    _wait(lambda: client.get(f"/v1/jobs/{job['id']}", headers=ALICE).json()["status"]
          == "PROCESSING")  # fmt: skip
    # The first request starts the host's agent; its state comes with the first sample.
    _wait(lambda: client.get("/v1/host", headers=ALICE).json()["state"] is not None)
    mine = client.get("/v1/host", headers=ALICE).json()
    theirs = client.get("/v1/host", headers=BOB).json()
    state = mine["state"]
    assert state is not None and 0.0 <= state["cpu_util"] <= 1.0 and 0.0 < state["mem_util"] <= 1.0
    assert mine["cpu_cores"] >= 1 and mine["mem_mb"] > 0
    assert [a["job_id"] for a in mine["allocations"]] == [job["id"]]
    held = mine["allocations"][0]
    assert (held["learners"], held["cpus"], held["gpus"], held["mem_mb"]) == (2, 1.0, 0, 2048)
    assert mine["allocated_cpus"] == 1.0 and mine["allocated_gpus"] == 0
    assert theirs["allocations"] == [] and theirs["allocated_cpus"] == 0
    # Release the learners and let the job end before the service stops.
    data_dir = client.app.state.service.settings.data_dir  # type: ignore[attr-defined]
    (data_dir / "jobs" / held_tenant(client) / job["id"] / "work" / "release").touch()
    _wait(lambda: client.get(f"/v1/jobs/{job['id']}", headers=ALICE).json()["status"]
          == "COMPLETED")  # fmt: skip
    assert client.get("/v1/host", headers=ALICE).json()["allocations"] == []


def test_result_is_the_jobs_own_document_and_another_tenant_sees_404(
    client: TestClient,
) -> None:
    job = {**HOLDER, "learners": 1, "spec": {"argv": [sys.executable, "-c", RESULT_WRITER]}}
    job_id = client.post("/v1/jobs", json=job, headers=ALICE).json()["id"]
    path = f"/v1/jobs/{job_id}/result"
    _wait(lambda: client.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"]
          == "COMPLETED")  # fmt: skip
    result = client.get(path, headers=ALICE)
    assert result.status_code == 200
    assert result.json() == {"streams": [{"stream_id": "cam-1"}]}
    assert client.get(path, headers=BOB).status_code == 404


def test_result_is_404_before_the_job_writes_one(client: TestClient) -> None:
    quick = {**HOLDER, "learners": 1, "spec": {"argv": [sys.executable, "-c", "print('hi')"]}}
    job_id = client.post("/v1/jobs", json=quick, headers=ALICE).json()["id"]
    response = client.get(f"/v1/jobs/{job_id}/result", headers=ALICE)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
