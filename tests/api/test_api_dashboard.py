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
from deepedge.api.dashboard import DASHBOARD_PATH, ENTRY, MODULES, STATIC_PATH

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


STATIC = Path(__file__).resolve().parents[2] / "src" / "deepedge" / "api" / "static"


def _wait(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    assert wait_until(predicate, timeout_s), "condition not met in time"


def held_tenant(client: TestClient) -> str:
    """The id of alice's tenant (her jobs' folders are under it)."""
    tenant = client.app.state.service.store.tenant_by_token("token-alice")  # type: ignore[attr-defined]
    return str(tenant.id)


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_page_loads_only_its_own_modules_and_its_csp_admits_nothing_else(
    client: TestClient,
) -> None:
    response = client.get(DASHBOARD_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    # Nothing to fetch from elsewhere: no external script, stylesheet or CDN, no inline script.
    assert not re.search(r"<link[^>]+stylesheet|https?://(?!www\.w3\.org)", html)
    assert re.findall(r"<script[^>]*>", html) == [
        f'<script type="module" src="{STATIC_PATH}/{ENTRY}">'
    ]
    assert re.findall(r'rel="modulepreload" href="([^"]+)"', html) == [
        f"{STATIC_PATH}/{name}" for name in MODULES
    ]
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(styles) == 1 and ".chart" in styles[0]
    csp = response.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe" not in csp
    assert f"style-src '{_sha256(styles[0])}'" in csp
    assert "connect-src 'self'" in csp and "default-src 'none'" in csp
    # The page itself is the same for everyone; data come only through the token.
    assert "token-alice" not in html and "alice" not in html
    again = client.get(DASHBOARD_PATH, headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("name", MODULES)
def test_every_module_is_served_as_javascript_without_a_token(
    client: TestClient, name: str
) -> None:
    response = client.get(f"{STATIC_PATH}/{name}")
    assert response.status_code == 200
    # A module script of another MIME type is refused by the browser (and nosniff holds it).
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.text == (STATIC / name).read_text(encoding="utf-8")
    again = client.get(f"{STATIC_PATH}/{name}", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304


@pytest.mark.parametrize(
    "name", ["dashboard.css", "dashboard.html", "nope.js", "..%2Fdashboard.py", "DASHBOARD.JS"]
)
def test_only_the_listed_modules_are_served(client: TestClient, name: str) -> None:
    response = client.get(f"{STATIC_PATH}/{name}")
    assert response.status_code == 404


def test_the_module_list_is_every_script_and_every_import_is_on_it() -> None:
    scripts = {p.name for p in STATIC.glob("*.js")}
    assert scripts == set(MODULES)
    for name in MODULES:
        text = (STATIC / name).read_text(encoding="utf-8")
        assert len(text.splitlines()) < 600, name
        assert ".innerHTML" not in text and "eval(" not in text, name
        for imported in re.findall(r'^import [^;]*? from "([^"]+)";', text, re.M | re.S):
            assert imported.startswith("./") and imported[2:] in MODULES, (name, imported)


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
