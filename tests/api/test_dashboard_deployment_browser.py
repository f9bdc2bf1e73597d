"""The dashboard's deployment view end to end (live service, headless chromium): a
deployment's accuracy chart gains a point per scored window and an update marker when the
version trained by an update job is promoted, and a rollback marker when it is rolled back;
its live-traffic panel shows the data plane's request rate and latency and its endpoint;
an edge-server deployment's GPU/CPU allocations per Ekya window and its placement decisions,
tenant-scoped.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess

TOKEN = "token-alice"
WAIT_S = 60.0
# Samples stored before the update is asked for. The update trains on its last 15 windows
# (30 s), which hold min(stored, 30 s x the labelled rate: about 3/s, 90 samples) and must
# give it 50 after a quarter is held out (67): past 100 stored, a longer wait adds nothing.
UPDATE_SAMPLES = 100
UPDATE_WAIT_S = 300.0  # a model-update job starts Ray: slow on a loaded 2-core machine
# The traffic cards' texts read at once: every refresh round replaces them.
TRAFFIC_CARDS = """return Object.fromEntries([...document.querySelectorAll("#traffic .card")]
  .map((c) => [c.dataset.traffic, c.innerText]))"""

# One window every 2 s of live traffic from a camera that sends every true label
# back; every candidate passes its gate and is promoted at once (no canary), and none is
# rolled back automatically: each update job ends in a new served version, and only the test
# rolls back.
DEPLOYMENT = {
    "name": "cam-1",
    "labeller": "ground-truth",
    "window_s": 2.0,
    "target": {"nodes": ["tx2-1", "nano-1"]},
    "stream": {"window_size": 100},
    "canary": {"windows": 0},
    "gate": {"min_gain": -1.0, "rollback_tolerance": 1.0},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.0, "cooldown_windows": 0},
    "base_epochs": 2,
    # an update trains on the last 15 windows (30 s: about 3 labelled requests a second
    # reached the store at 10 requests/s, measured), a quarter held out
    "update": {"epochs": 1, "recent_windows": 15, "label_fraction": 1.0},
    "serving": {"cpus": 0.5, "sample_fraction": 1.0},
}


@contextlib.contextmanager
def camera(api: Any, name: str) -> Iterator[None]:
    """A camera sending the deployment's digits (10 requests/s, all labelled back) while the
    block runs, once the endpoint answers. At 30/s the data plane's replica, its sample
    writer and the control loop took both cores of a 2-core machine, and the niced update
    job's embedded Ray did not start in 300 s (measured at 57a4f63, quiet machine)."""
    import asyncio
    import threading

    from deepedge.cli.serving import camera_source
    from deepedge.dataplane.camera import CameraConfig, run_camera

    key = api.post(f"/v1/deployments/{name}/keys").json()
    auth = {"Authorization": f"Bearer {key['key']}"}
    deadline = time.monotonic() + UPDATE_WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if (
                httpx.get(f"{key['endpoint']}/ready", headers=auth, trust_env=False).status_code
                == 200
            ):
                break
        time.sleep(0.5)
    base = key["endpoint"].split("/v2/")[0]
    config = CameraConfig(base, key["model"], key["key"], rate=10.0, window_s=1.0,
                          windows=100_000, feedback=1.0)  # fmt: skip
    stop = threading.Event()
    source = camera_source("digits", 0, 3, 2)
    thread = threading.Thread(
        target=lambda: asyncio.run(run_camera(config, source, None, stop.is_set)), daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def _chart(browser: Any) -> dict[str, int]:
    chart = browser.find_element("id", "accuracy-chart")
    return {
        "points": int(chart.get_attribute("data-points") or 0),
        "last_window": int(chart.get_attribute("data-last-x") or -1),
        "markers": len(chart.find_elements("css selector", "line.marker")),
        "updates": len(chart.find_elements("css selector", "line.marker.update")),
        "rollbacks": len(chart.find_elements("css selector", "line.marker.rollback")),
    }


@pytest.mark.slow
def test_deployment_accuracy_chart_updates_after_an_update_job(
    live_site: ServerProcess, browser: Any
) -> None:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    server = live_site
    with (
        httpx.Client(base_url=server.url, headers=headers, trust_env=False) as api,
        camera(api, _created(api, DEPLOYMENT)),
    ):
        browser.get(server.url + DASHBOARD_PATH)
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "login-button").click()
        wait.until(ec.visibility_of_element_located((By.ID, "deployment-detail")))
        # The first version (its training job done, promoted) is served and scored.
        wait.until(lambda _: _chart(browser)["points"] >= 2 and _chart(browser)["updates"] >= 1)
        before = _chart(browser)
        assert before["rollbacks"] == 0
        assert browser.find_element(By.CSS_SELECTOR, '#deployments tr[data-deployment="cam-1"]')
        nodes = browser.find_elements(By.CSS_SELECTOR, "#nodes tbody tr")
        assert {"tx2-1", "nano-1"} <= {n.get_attribute("data-node") for n in nodes}
        _check_live_traffic(browser, api, server)

        # the update trains on the last 15 windows: asked for once the camera has filled them
        _wait_for_samples(api, UPDATE_SAMPLES)
        assert api.post("/v1/deployments/cam-1/update").status_code == 202
        # The update job's version is promoted: the chart gains its marker and keeps scoring.
        slow = WebDriverWait(browser, UPDATE_WAIT_S)
        try:
            slow.until(lambda _: _chart(browser)["updates"] > before["updates"])
        except TimeoutException:
            raise AssertionError(_why_not_promoted(api, server)) from None
        wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, '#versions tr[data-version="2"]'))
        )
        job_id = api.get("/v1/deployments/cam-1/versions").json()["versions"][1]["job_id"]
        assert job_id and api.get(f"/v1/jobs/{job_id}").json()["status"] == "COMPLETED"
        # (the job list and the chart are read concurrently: the row may lag one refresh)
        done = f'#jobs tr[data-job-id="{job_id}"][data-status="COMPLETED"]'
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, done)))
        after = _chart(browser)
        # (the page shows the last 200 windows: it is the newest window that must move on)
        wait.until(lambda _: _chart(browser)["last_window"] > after["last_window"])

        assert (
            api.post("/v1/deployments/cam-1/rollback", json={"reason": "test"}).status_code == 202
        )
        wait.until(lambda _: _chart(browser)["rollbacks"] == 1)
        kinds = [
            e.get_attribute("data-kind")
            for e in browser.find_elements(By.CSS_SELECTOR, "#events li")
        ]
        assert "rolled-back" in kinds and "promoted" in kinds


def _wait_for_samples(api: Any, count: int) -> None:
    deadline = time.monotonic() + UPDATE_WAIT_S
    while time.monotonic() < deadline:
        answer = api.get("/v1/deployments/cam-1/traffic", params={"span_s": 10}).json()
        if (answer.get("samples") or {}).get("stored", 0) >= count:
            return
        time.sleep(1.0)
    raise AssertionError(f"the sample store did not reach {count} samples: {answer}")


def _modified(path: Path) -> float:
    return path.stat().st_mtime


def _why_not_promoted(api: Any, server: ServerProcess) -> str:
    """The deployment's newest events and the newest learner log's tail: what a timed-out
    wait for the update's version reports (a bare TimeoutException says nothing)."""
    events = api.get("/v1/deployments/cam-1/events").json()
    lines = [f"{e.get('kind')}: {e.get('message')}" for e in events.get("events", [])][-8:]
    logs = sorted(server.settings.data_dir.glob("jobs/*/*/logs/*.log"), key=_modified)
    tail = logs[-1].read_text(errors="replace").splitlines()[-6:] if logs else []
    return "\n".join(["events:", *lines, "newest learner log:", *tail])


def _traffic_cards(browser: Any) -> dict[str, list[str]] | None:
    """The traffic panel's cards (title, figure, caption), once it shows answered requests."""
    if not browser.find_element("id", "traffic").is_displayed():
        return None
    cards = {k: v.split("\n") for k, v in browser.execute_script(TRAFFIC_CARDS).items()}
    shown = "requests" in cards and cards["requests"][1] not in ("0.0 /s", "—")
    return cards if shown and cards["latency in the replica"][1] != "—" else None


def _milliseconds(figure: str) -> float:
    assert figure.endswith(" ms"), figure
    return float(figure.removesuffix(" ms"))


def _check_live_traffic(browser: Any, api: Any, server: ServerProcess) -> None:
    """The traffic panel shows what the data plane measured of the camera's requests (10/s),
    and the endpoint the camera calls, on the data plane's port."""
    from selenium.webdriver.support.ui import WebDriverWait

    cards = WebDriverWait(browser, WAIT_S).until(_traffic_cards)
    rps = float(cards["requests"][1].removesuffix(" /s"))
    count, span = cards["requests"][2].split(" over the last ")
    assert rps > 0 and int(count) > 0 and span == "10 s", cards["requests"]
    replica = _milliseconds(cards["latency in the replica"][1])
    assert replica > 0 and cards["latency in the replica"][2].startswith("p50; p95 "), cards
    assert cards["latency at the ingress"][0] == "latency at the ingress", cards
    assert cards["failed"][2] == "requests"
    answer = api.get("/v1/deployments/cam-1/traffic", params={"span_s": 10}).json()
    assert answer["data_plane"] is True and answer["traffic"]["requests"] > 0, answer
    endpoint = browser.find_element("id", "traffic-endpoint").text
    settings = server.settings
    served = f"http://{settings.serving_host}:{settings.serving_port}/v2/models/alice.cam-1"
    assert answer["endpoint"] == served, answer
    assert f"endpoint {served} (model alice.cam-1); samples kept " in endpoint
    assert "no data plane" not in endpoint
    # every request is sampled, and the chart's windows were scored on them
    kept = re.search(r"samples kept (\d+)", endpoint)
    assert kept is not None and int(kept.group(1)) > 0, endpoint


def _created(api: Any, spec: dict[str, Any]) -> str:
    created = api.post("/v1/deployments", json=spec)
    assert created.status_code == 201, created.text
    return str(spec["name"])


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _edge_deployment(name: str, server: str = "edge-1") -> dict[str, Any]:
    """An edge-server deployment that never triggers an update by itself (no Ray here), with
    an MVSP placement problem that the service solves with a real placement job."""
    return {
        "name": name,
        "labeller": "ground-truth",
        "window_s": 0.5,
        "target": {"kind": "edge-server", "gpus": 2, "nodes": [server]},
        "update": {"policy": "ekya-window"},
        "stream": {"window_size": 100},
        "trigger": {"sample_count": None, "accuracy_threshold": 0.0, "cooldown_windows": 0},
        "base_epochs": 2,
        "placement": json.loads((EXAMPLES / "placement-tiny.json").read_text()),
    }


def _record_ekya_window(
    url: str, name: str, window: int, retraining: str, beside: str | None = None
) -> None:
    """Commit the allocation event the control plane commits when one of the deployment's
    ``ekya-window`` jobs completes, decoded from such a job's result by the control plane's
    own function (the job itself, which needs Ray, runs in tests/service/
    test_control_plane_ekya.py; here the page is under test). ``beside``: another stream
    on the edge server in the same window, inference only (its share comes out of it)."""
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.update_jobs import ekya_allocation
    from deepedge.core.errors import ConflictError
    from deepedge.service.store import JobStore

    store = JobStore(url)
    try:
        registry = DeploymentStore(store)
        record = next(r for r in registry.live() if r.name == name)
        decision = {"stream_id": name, "inference_config": "r500", "inference_gpus": 0.4,
                    "retraining_config": retraining, "retraining_gpus": 1.3 if beside else 1.6,
                    "window_accuracy": 0.8}  # fmt: skip
        streams = [decision]
        if beside is not None:
            streams.append({"stream_id": beside, "inference_config": "r250", "inference_gpus": 0.3,
                            "retraining_config": None, "retraining_gpus": 0.0,
                            "window_accuracy": 0.7})  # fmt: skip
        result = {"scheduler": "thief", "device": "cpu", "retrained": retraining, "configs": [],
                  "plans": [{"gpus": 2.0, "window_s": 30.0, "streams": streams}]}  # fmt: skip
        server = record.spec.target.nodes[0]
        event = ekya_allocation(name, server, window, window, "f" * 32, result)
        assert event is not None
        for _ in range(50):  # the service's control loop commits beside us (compare-and-set)
            try:
                registry.commit(registry.get_by_id(record.id), Step(events=(event,)))
                return
            except ConflictError:
                time.sleep(0.05)
        raise AssertionError("could not record the window")
    finally:
        store.dispose()


@pytest.mark.slow
def test_edge_server_allocations_per_window_and_placement_decisions_per_tenant(
    live_server: ServerProcess, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    server = live_server
    # (an edge server's deployments are one tenant's: bob's are on the site's other one)
    for token, name, node in ((TOKEN, "edge-cam", "edge-1"), ("token-bob", "bobs-edge", "edge-2")):
        with httpx.Client(base_url=server.url, trust_env=False,
                          headers={"Authorization": f"Bearer {token}"}) as api:  # fmt: skip
            created = api.post("/v1/deployments", json=_edge_deployment(name, node))
            assert created.status_code == 201, created.text
    _record_ekya_window(server.settings.url, "edge-cam", 3, "e1-f50-z1", beside="edge-door")
    _record_ekya_window(server.settings.url, "edge-cam", 5, "e4-f100-z0")
    _record_ekya_window(server.settings.url, "bobs-edge", 4, "e4-f50-z1")

    browser.get(server.url + DASHBOARD_PATH)
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login-button").click()
    wait.until(ec.visibility_of_element_located((By.ID, "deployment-detail")))
    rows = wait.until(
        lambda _: (
            browser.find_elements(By.CSS_SELECTOR, '#allocations tr[data-policy="ekya-window"]')
            if len(browser.find_elements(By.CSS_SELECTOR, "#allocations tr[data-policy]")) >= 2
            else None
        )
    )
    by_window = {r.get_attribute("data-window"): r.text for r in rows}
    assert set(by_window) == {"3", "5"}  # one row per window, newest first
    assert (
        "inference 0.40 (r500)" in by_window["5"]
        and "retraining 1.60 (e4-f100-z0)" in by_window["5"]
    )
    # Window 3 was the edge server's joint window: the whole split, this deployment's marked.
    assert "edge-cam (this deployment):" in by_window["3"]
    assert "retraining 1.30 (e1-f50-z1)" in by_window["3"]
    assert "edge-door:" in by_window["3"] and "inference 0.30 (r250)" in by_window["3"]
    assert "this deployment" not in by_window["5"]
    assert "of 2.00 GPU-equivalents (CPU threads) on edge-1" in by_window["5"]
    # The edge server's row holds the newest window's shares; the PS does not serve it.
    edge = browser.find_element(By.CSS_SELECTOR, '#nodes tr[data-node="edge-1"]')
    wait.until(lambda _: "edge-cam v5 w5: inference 0.40 (r500), retraining 1.60" in edge.text)
    ps = browser.find_element(By.CSS_SELECTOR, '#nodes tr[data-node="pi4-ps"]')
    assert "edge-cam" not in ps.text
    # The deployment's placement, solved by its placement job, is shown with its decisions.
    placed = wait.until(
        lambda _: (
            browser.find_elements(By.CSS_SELECTOR, "#placement table.placements tbody tr") or None
        )
    )
    assert {p.text.split()[0] for p in placed} <= {"edge-a", "edge-b"}
    wait.until(
        lambda _: any(
            "placement decided" in li.text
            for li in browser.find_elements(By.CSS_SELECTOR, '#events li[data-kind="placement"]')
        )
    )
    # Tenant-scoped: nothing of bob's deployment, its window or its shares.
    page = browser.find_element(By.ID, "app").text
    assert "bobs-edge" not in page and "e4-f50-z1" not in page
