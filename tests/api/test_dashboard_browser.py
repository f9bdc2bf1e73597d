"""The dashboard end to end: a live ``deepedge serve`` on loopback, Debian's headless chromium
driven by Selenium (fixtures ``live_server`` and ``browser`` in conftest.py). Log in with a
tenant token, see only that tenant's jobs, follow a job's log live while it runs, see its
status history reach COMPLETED; see the GPU allocations per stream of an Ekya window job
and the decisions of a placement job.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from _support import wait_until
from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess

TOKEN = "token-alice"
WAIT_S = 60.0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def _submit(server: ServerProcess, token: str, name: str, argv: list[str]) -> str:
    manifest = {"name": name, "kind": "command", "resources": {"cpus": 0.5}, "spec": {"argv": argv}}
    return _post(server, token, manifest)


def _post(server: ServerProcess, token: str, manifest: dict[str, Any]) -> str:
    response = httpx.post(f"{server.url}/v1/jobs", json=manifest, trust_env=False,
                          headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.slow
def test_log_in_see_own_jobs_and_follow_a_log_live(
    live_server: ServerProcess, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT_S)
    # Prints, then blocks until the test opens the gate (a file in the job's work folder,
    # the only host folder its sandbox sees): the second line can only reach the page
    # through a follower still attached while the job runs.
    script = (
        "import json, os, pathlib, time\n"
        "rank = os.environ['DEEPEDGE_LEARNER_RANK']\n"
        "print(f'learner {rank} waiting for the gate', flush=True)\n"
        "deadline = time.monotonic() + 300\n"
        "while not pathlib.Path('gate').exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "with open(os.environ['DEEPEDGE_METRICS_FILE'], 'a') as out:\n"
        "    out.write(json.dumps({'step': 7, 'accuracy': 0.875}) + '\\n')\n"
        "print(f'learner {rank}: gate opened, done', flush=True)\n"
    )
    server = live_server
    gated = {"name": "gated", "kind": "command", "learners": 2, "resources": {"cpus": 0.5},
             "spec": {"argv": [sys.executable, "-c", script]}}  # fmt: skip
    job_id = _post(server, TOKEN, gated)
    jobs = server.settings.data_dir / "jobs"
    assert wait_until(lambda: any(jobs.glob(f"*/{job_id}/work")), WAIT_S)
    gate = next(jobs.glob(f"*/{job_id}/work")) / "gate"
    theirs = _submit(server, "token-bob", "bobs-job", [sys.executable, "-c", "print(1)"])
    window_job = _post(server, TOKEN, yaml.safe_load((EXAMPLES / "ekya-window.yaml").read_text()))
    placement_job = _post(server, TOKEN, yaml.safe_load((EXAMPLES / "placement.yaml").read_text()))

    browser.get(server.url + DASHBOARD_PATH)
    browser.find_element(By.ID, "token").send_keys("not-a-token")
    browser.find_element(By.ID, "login-button").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "login-error"), "refused"))
    assert not browser.find_element(By.ID, "app").is_displayed()

    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(TOKEN)
    browser.find_element(By.ID, "login-button").click()
    row = wait.until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, f'#jobs tr[data-job-id="{job_id}"]'))
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    shown = {r.get_attribute("data-job-id") for r in rows}
    assert shown == {job_id, window_job, placement_job}  # bob's job is not here
    assert theirs not in browser.page_source
    host = wait.until(ec.visibility_of_element_located((By.ID, "host-card")))
    assert "service host" in host.text and "CPU" in host.text

    row.click()
    wait.until(
        ec.text_to_be_present_in_element((By.ID, "job-log"), "learner 0 waiting for the gate")
    )
    wait.until(ec.text_to_be_present_in_element((By.ID, "job-status"), "PROCESSING"))
    log = browser.find_element(By.ID, "job-log")
    assert log.get_attribute("data-state") == "following"
    assert "gate opened" not in log.text and "learner 1" not in log.text

    gate.touch()
    wait.until(ec.text_to_be_present_in_element((By.ID, "job-log"), "learner 0: gate opened"))
    ended = ec.text_to_be_present_in_element_attribute((By.ID, "job-log"), "data-state", "ended")
    wait.until(ended)
    wait.until(ec.text_to_be_present_in_element((By.ID, "job-status"), "COMPLETED"))
    history = [
        li.get_attribute("data-status")
        for li in browser.find_elements(By.CSS_SELECTOR, "#job-history li")
    ]
    assert history[0] == "QUEUED" and history[-1] == "COMPLETED"
    assert "PROCESSING" in history
    # The log was read by one follower, from start to end, without duplicates.
    assert log.text.count("waiting for the gate") == 1
    wait.until(ec.text_to_be_present_in_element((By.ID, "job-metrics"), "accuracy 0.8750"))
    assert "step 7" in browser.find_element(By.ID, "job-metrics").text

    # The second learner's log, chosen from the page.
    Select(browser.find_element(By.ID, "log-rank")).select_by_value("1")
    wait.until(ec.text_to_be_present_in_element((By.ID, "job-log"), "learner 1: gate opened"))
    assert "learner 0" not in browser.find_element(By.ID, "job-log").text

    # The finished Ekya window job's allocations per stream, the placement job's decisions.
    streams = wait.until(
        lambda _: browser.find_elements(By.CSS_SELECTOR, "#windows tr[data-stream]") or None
    )
    assert {s.get_attribute("data-stream") for s in streams} == {"A", "B"}
    assert window_job[:8] in browser.find_element(By.ID, "windows-source").text
    placed = wait.until(
        lambda _: (
            browser.find_elements(By.CSS_SELECTOR, "#placement table.placements tbody tr") or None
        )
    )
    assert {p.text.split()[0] for p in placed} <= {"edge-a", "edge-b"}
    assert placement_job[:8] in browser.find_element(By.ID, "placement-source").text

    browser.find_element(By.ID, "logout").click()
    wait.until(ec.visibility_of_element_located((By.ID, "login-view")))
    assert browser.execute_script("return sessionStorage.getItem('deepedge.token')") is None

    # The other tenant, in the same tab: only its own job, nothing left of the first.
    assert browser.find_element(By.ID, "token").get_attribute("value") == ""  # not kept
    browser.find_element(By.ID, "token").send_keys("token-bob")
    browser.find_element(By.ID, "login-button").click()
    wait.until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f'#jobs tr[data-job-id="{theirs}"]'))
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    assert [r.get_attribute("data-job-id") for r in rows] == [theirs]
    assert not browser.find_element(By.ID, "windows-section").is_displayed()
    assert not browser.find_element(By.ID, "job-detail").is_displayed()
    assert "gated" not in browser.find_element(By.ID, "app").text
