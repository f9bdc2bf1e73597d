"""The dashboard's deployment view end to end (live service, headless chromium): a
deployment's accuracy chart gains a point per scored window and an update marker when the
version trained by an update job is promoted, and a rollback marker when it is rolled back.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess

TOKEN = "token-alice"
WAIT_S = 60.0
UPDATE_WAIT_S = 300.0  # a model-update job starts Ray: slow on a loaded 2-core machine

# One window every half second, scored on the stream's own labels; every candidate passes
# its gate and is promoted at once (no canary), and none is rolled back automatically: each
# update job ends in a new served version, and only the test rolls back.
DEPLOYMENT = {
    "name": "cam-1",
    "labeller": "ground-truth",
    "window_s": 0.5,
    "target": {"nodes": ["tx2-1", "nano-1"]},
    "stream": {"window_size": 100},  # an update trains on 100 * 2 windows * 0.5 labelled * 0.75
    "canary": {"windows": 0},
    "gate": {"min_gain": -1.0, "rollback_tolerance": 1.0},
    "trigger": {"accuracy_threshold": 0.0, "cooldown_windows": 0},
    "base_epochs": 2,
    "update": {"epochs": 1},
}


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
    live_server: ServerProcess, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    server = live_server
    with httpx.Client(base_url=server.url, headers=headers, trust_env=False) as api:
        created = api.post("/v1/deployments", json=DEPLOYMENT)
        assert created.status_code == 201, created.text

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

        assert api.post("/v1/deployments/cam-1/update").status_code == 202
        # The update job's version is promoted: the chart gains its marker and keeps scoring.
        slow = WebDriverWait(browser, UPDATE_WAIT_S)
        slow.until(lambda _: _chart(browser)["updates"] > before["updates"])
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
