"""The dashboard as a site operator uses it, in headless chromium at 1440x900 and at phone
width (390x844), over a live service whose store holds a site's history (_site_history.py):

* a health summary, each deployment's accuracy coloured against its trigger threshold, the
  tenant named in the header (and nothing left of it after logout), hints when empty;
* the accuracy chart: every canary (a one-window canary too), each on its own, the trigger
  threshold, marker labels that never overprint, its real width, a time range;
* an Ekya window that says what each stream retrained, and when its model failed the gate;
* a URL for each deployment, job and node, and the browser's back button;
* no horizontal overflow anywhere, at either width;
* a dead service shown as dead: a banner, the stale figures greyed out, and back to live.

The screenshots of docs/OPERATING.md are taken here: ``DEEPEDGE_SCREENSHOTS=docs/images``
(``make screenshots``) writes them there, otherwise into the test's temporary folder.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _api_helpers import OVERFLOW
from _site_history import (
    DRIFT_LEVEL,
    DRIFT_PROMOTED,
    DRIFT_TRIGGER,
    DRIFT_V3,
    DRIFT_WINDOWS,
    GATE_WINDOWS,
    THRESHOLD,
    TRAFFIC_RPS,
    joint_window_result,
    seed,
    seed_drift,
    seed_traffic,
)

from _support import wait_until
from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore
from deepedge.service.workspace import Workspace

WAIT_S = 60.0
WINDOW_SUMMARY = "#windows .window-summary"
# The traffic cards' texts read at once: every refresh round replaces them.
TRAFFIC_CARDS = """return Object.fromEntries([...document.querySelectorAll("#traffic .card")]
  .map((c) => [c.dataset.traffic, c.innerText]))"""
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
COUNTER = {"name": "counter", "kind": "command", "resources": {"cpus": 0.5},
           "spec": {"argv": [sys.executable, "-m", "deepedge.service.demo_learner",
                             "--steps", "5", "--step-s", "0.02"]}}  # fmt: skip


class Site:
    """A live service over a seeded store, and the ids of the jobs it ran."""

    def __init__(self, root: Path) -> None:
        self.settings = ServiceSettings(data_dir=root / "data")
        self.settings.data_dir.mkdir(parents=True)
        store = JobStore(self.settings.url)
        store.migrate()
        self.settings.claim_uids(store)  # (as `deepedge tenants create` does)
        self.alice = store.create_tenant("alice", "token-alice").id
        store.create_tenant("bob", "token-bob")
        carol = store.create_tenant("carol", "token-carol").id
        store.dispose()
        seed(self.settings.url, self.alice)
        seed_drift(self.settings.url, carol)
        seed_traffic(self.settings.url, self.settings.data_dir, self.alice)
        self.server = ServerProcess(self.settings)
        self.jobs: dict[str, str] = {}

    @property
    def url(self) -> str:
        return self.server.url

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, trust_env=False, timeout=60,
                            headers={"Authorization": "Bearer token-alice"})  # fmt: skip

    def run_jobs(self) -> None:
        """An Ekya window, a placement and a command that reports metrics, all finished; the
        Ekya window's result then is an edge server's joint window (what the control plane's
        window jobs keep), in which one stream retrained."""
        manifests = {
            "ekya": yaml.safe_load((EXAMPLES / "ekya-window.yaml").read_text()),
            "placement": yaml.safe_load((EXAMPLES / "placement.yaml").read_text()),
            "counter": COUNTER,
        }
        with self.api() as api:
            for key, manifest in manifests.items():
                answer = api.post("/v1/jobs", json=manifest)
                assert answer.status_code == 201, answer.text
                self.jobs[key] = answer.json()["id"]

            def done() -> bool:
                states = [api.get(f"/v1/jobs/{i}").json()["status"] for i in self.jobs.values()]
                assert "FAILED" not in states, states
                return all(s == "COMPLETED" for s in states)

            assert wait_until(done, 180, interval_s=0.3)
            planned = api.get(f"/v1/jobs/{self.jobs['ekya']}/result").json()
        retraining = next(s for s in planned["streams"] if s["retraining_config"])
        self.planned = planned
        self.retrained = (retraining["stream_id"], retraining["retraining_config"])
        self.write_ekya_result(gate_passed=True)

    def write_ekya_result(self, gate_passed: bool) -> None:
        """The Ekya window's result as the edge server keeps it: its retrained stream passed
        the gate against the deployed model, or failed it (and the deployed model served on)."""
        result = joint_window_result(self.planned, *self.retrained, gate_passed=gate_passed)
        path = Workspace(self.settings.data_dir).job_dir(self.alice, self.jobs["ekya"])
        (path.results / "result.json").write_text(json.dumps(result))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    built = Site(tmp_path_factory.mktemp("site"))
    try:  # a start that times out still leaves its process to stop
        built.server.start()
        built.run_jobs()
        yield built
    finally:
        built.server.stop()


@pytest.fixture
def sized(sized_browser: Any) -> Any:
    return sized_browser


def _wait(browser: Any, condition: Any, timeout_s: float = WAIT_S) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout_s).until(condition)


def _login(browser: Any, url: str, token: str = "token-alice", fragment: str = "") -> None:
    browser.get(url + DASHBOARD_PATH + fragment)
    browser.find_element("id", "token").send_keys(token)
    browser.find_element("id", "login-button").click()
    _wait(browser, lambda b: b.find_element("id", "app").is_displayed())
    _wait(browser, lambda b: b.find_elements("css selector", "#nodes tbody tr"))


def _go(browser: Any, fragment: str) -> None:
    browser.execute_script("location.hash = arguments[0]", fragment)


def shot(browser: Any, name: str, tmp_path: Path) -> Path:
    """A screenshot for docs/OPERATING.md (``DEEPEDGE_SCREENSHOTS``) or the test's folder."""
    folder = Path(os.environ.get("DEEPEDGE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    width = browser.execute_script("return window.innerWidth")
    path = folder / f"{name}-{width}.png"
    time.sleep(0.3)  # the last paint
    assert browser.save_screenshot(str(path))
    return path


def _text(browser: Any, css: str) -> str:
    return str(browser.find_element("css selector", css).text)


@pytest.mark.slow
def test_health_thresholds_tenant_and_empty_hints(site: Site, sized: Any, tmp_path: Path) -> None:
    browser = sized
    _login(browser, site.url)
    assert _text(browser, "#whoami") == "tenant alice"
    _wait(browser, lambda b: b.find_elements("css selector", '#health [data-health="nodes"]'))
    levels = {c.get_attribute("data-health"): c.get_attribute("data-level")
              for c in browser.find_elements("css selector", "#health .card")}  # fmt: skip
    assert levels == {"deployments": "bad", "jobs": "ok", "nodes": "ok", "service": "ok"}
    deployments = _text(browser, '#health [data-health="deployments"]')
    assert "2 of 3 accurate" in deployments and "gate-cam 74.0 %" in deployments
    assert "7 of 7 up" in _text(browser, '#health [data-health="nodes"]')
    # Each accuracy against its own deployment's trigger threshold.
    shown = {r.get_attribute("data-deployment"): r.find_element("css selector", ".acc")
             for r in browser.find_elements("css selector", "#deployments tbody tr")}  # fmt: skip
    assert {k: v.get_attribute("data-level") for k, v in shown.items()} == {
        "gate-cam": "bad", "yard-cam": "ok", "edge-cam": "ok"}  # fmt: skip
    assert "below the trigger threshold 80.0 %" in shown["gate-cam"].get_attribute("title")
    red = browser.execute_script("return getComputedStyle(arguments[0]).color", shown["gate-cam"])
    green = browser.execute_script("return getComputedStyle(arguments[0]).color", shown["yard-cam"])
    assert red == "rgb(207, 34, 46)" and green == "rgb(26, 127, 55)"
    shot(browser, "overview", tmp_path)

    browser.find_element("id", "logout").click()
    _wait(browser, lambda b: b.find_element("id", "login-view").is_displayed())
    for header in ("whoami", "refresh-state", "connection"):
        assert browser.find_element("id", header).text == ""
    # A tenant with nothing yet is told what to do.
    _login(browser, site.url, "token-bob")
    assert _text(browser, "#whoami") == "tenant bob"
    hint = _wait(browser, lambda b: b.find_element("id", "deployments-empty").is_displayed()
                 and b.find_element("id", "deployments-empty"))  # fmt: skip
    assert "deepedge deploy examples/deployments/digits-line.yaml" in hint.text
    assert browser.find_element("id", "jobs-empty").is_displayed()
    assert "gate-cam" not in browser.find_element("id", "app").text


def _rect(browser: Any, element: Any) -> dict[str, float]:
    return dict(browser.execute_script("return arguments[0].getBoundingClientRect().toJSON()",
                                       element))  # fmt: skip


def _chart(browser: Any) -> Any:
    return browser.find_element("id", "accuracy-chart")


@pytest.mark.slow
def test_the_chart_draws_every_canary_the_threshold_and_readable_labels(
    site: Site, sized: Any, tmp_path: Path
) -> None:
    browser = sized
    _login(browser, site.url, fragment="#/deployments/gate-cam")
    _wait(browser, lambda b: _chart(b).get_attribute("data-points") == str(GATE_WINDOWS))
    chart = _chart(browser)
    assert chart.get_attribute("data-canaries") == "3"
    runs = {g.get_attribute("data-from"): g for g in
            chart.find_elements("css selector", "g.canary-run")}  # fmt: skip
    assert set(runs) == {"16", "28", "34"}
    for one_window in ("16", "34"):  # drawn although a line needs two points
        assert len(runs[one_window].find_elements("css selector", "circle")) == 1
        assert not runs[one_window].find_elements("css selector", "polyline")
    line = runs["28"].find_elements("css selector", "polyline.canary")
    assert len(line) == 1 and len(line[0].get_attribute("points").split()) == 3
    # No line joins separate canaries: the only canary polyline is the three-window run's.
    assert len(chart.find_elements("css selector", "polyline.canary")) == 1

    threshold = chart.find_element("css selector", "line.threshold")
    assert float(threshold.get_attribute("data-threshold")) == THRESHOLD
    grid = sorted(
        float(g.get_attribute("y1")) for g in chart.find_elements("css selector", "line.grid")
    )
    top, bottom = grid[0], grid[-1]  # 100 % and 0 %
    assert abs(float(threshold.get_attribute("y1")) - (bottom - THRESHOLD * (bottom - top))) < 0.5
    assert "trigger below 80.0 %" in chart.find_element("css selector", ".threshold-label").text

    kinds = [
        m.get_attribute("data-kind") for m in chart.find_elements("css selector", "line.marker")
    ]
    # v1 (promoted before window 0, drawn there), v2 and v4 promoted, v3 rolled back.
    assert sorted(kinds) == ["canary"] * 3 + ["rollback"] + ["update"] * 3
    assert_no_marker_crosses_a_level_label(browser)
    labels = chart.find_elements("css selector", "text.marker-label")
    assert len(labels) == 7
    boxes = [_rect(browser, t) for t in labels]
    frame = _rect(browser, chart)
    for box in boxes:  # every label whole, inside the chart
        assert frame["left"] <= box["left"] and box["right"] <= frame["right"] + 0.5
        assert frame["top"] <= box["top"]
    for a, b in itertools.combinations(boxes, 2):  # and none over another
        apart = a["right"] <= b["left"] or b["right"] <= a["left"]
        assert apart or a["bottom"] <= b["top"] or b["bottom"] <= a["top"], (a, b)
    # Drawn at its real width (no 900-pixel cap), its text at a readable size.
    box = browser.find_element("id", "chart-box")
    assert abs(frame["width"] - box.size["width"]) < 1
    if browser.execute_script("return window.innerWidth") >= 1440:
        assert frame["width"] > 1200
    tick = chart.find_element("css selector", "text")
    assert _rect(browser, tick)["height"] >= 11
    font = "return parseFloat(getComputedStyle(arguments[0]).fontSize)"
    assert float(browser.execute_script(font, tick)) >= 11
    _wait(browser, lambda b: b.find_element("id", "traffic").is_displayed())
    shot(browser, "deployment", tmp_path)

    # The time range: the newest 20 windows, then all of them.
    browser.find_element("css selector", '#chart-range [data-range="20"]').click()
    _wait(browser, lambda b: _chart(b).get_attribute("data-points") == "20")
    assert _chart(browser).get_attribute("data-last-x") == str(GATE_WINDOWS - 1)
    assert _chart(browser).get_attribute("data-canaries") == "2"  # windows 28-30 and 34
    browser.find_element("css selector", '#chart-range [data-range="all"]').click()
    _wait(browser, lambda b: _chart(b).get_attribute("data-points") == str(GATE_WINDOWS))


# Every marker line's piece and every level label's box, in the chart's own coordinates.
CHART_GEOMETRY = """
const chart = document.getElementById("accuracy-chart");
const lines = [...chart.querySelectorAll("line.marker, line.marker-rest")].map((l) =>
  [l.x1.baseVal.value, l.y1.baseVal.value, l.y2.baseVal.value]);
const labels = [...chart.querySelectorAll("text.threshold-label, text.before-label")].map((t) => {
  const b = t.getBBox();
  return [t.getAttribute("class"), b.x, b.y, b.x + b.width, b.y + b.height];
});
return [lines, labels, chart.viewBox.baseVal.width];
"""


def assert_no_marker_crosses_a_level_label(browser: Any) -> None:
    lines, labels, width = browser.execute_script(CHART_GEOMETRY)
    assert labels and lines
    for name, left, top, right, bottom in labels:
        assert left >= 0 and right <= width, (name, left, right, width)
        for x, y1, y2 in lines:
            crosses = left - 1 <= x <= right + 1 and min(y1, y2) < bottom and max(y1, y2) > top
            assert not crosses, (name, (left, top, right, bottom), (x, y1, y2))
    for a, b in itertools.combinations(labels, 2):  # and the labels themselves apart
        assert a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2], (a, b)


def _import(browser: Any, module: str, call: str, *args: Any) -> Any:
    """``call`` (an expression of ``m``, the page's module ``module``) as the page computes it."""
    script = ("const done = arguments[arguments.length - 1]; import('/dashboard/static/" + module +
              "').then((m) => done(" + call + "))")  # fmt: skip
    return browser.execute_async_script(script, *args)


@pytest.mark.slow
def test_the_served_accuracy_curve_marks_versions_and_the_update_it_replaced(
    site: Site, sized: Any, tmp_path: Path
) -> None:
    browser = sized
    _login(browser, site.url, "token-carol", "#/deployments/drift-cam")
    scored = DRIFT_WINDOWS - 1  # the last window had no labelled sample
    _wait(browser, lambda b: _chart(b).get_attribute("data-points") == str(scored))
    chart = _chart(browser)
    assert len(chart.find_elements("css selector", "polyline.served")) == 1
    versions = {c.get_attribute("data-version") for c in
                chart.find_elements("css selector", "circle.point")}  # fmt: skip
    assert versions == {"1", "2", "3"}
    # v1 and v2 by their promotions, v3 by the windows alone (no event read says it).
    markers = {(m.get_attribute("data-kind"), m.get_attribute("data-x"))
               for m in chart.find_elements("css selector", "line.marker")}  # fmt: skip
    assert markers == {("update", "0"), ("update", str(DRIFT_PROMOTED)), ("version", str(DRIFT_V3))}
    version = chart.find_element("css selector", 'text.marker-label[data-kind="version"]')
    assert version.text == "v3"
    # Without this update: the version each one replaced, on the same windows.
    runs = {r.get_attribute("data-version"): r for r in
            chart.find_elements("css selector", "g.shadow-run")}  # fmt: skip
    assert set(runs) == {"1", "2"}
    assert runs["1"].get_attribute("data-from") == str(DRIFT_PROMOTED + 1)
    assert runs["2"].get_attribute("data-to") == str(DRIFT_WINDOWS - 2)
    assert chart.get_attribute("data-shadow") == str(DRIFT_WINDOWS - 2 - DRIFT_PROMOTED)
    before = chart.find_element("css selector", "line.before")
    assert float(before.get_attribute("data-level")) == DRIFT_LEVEL
    assert before.get_attribute("data-window") == str(DRIFT_TRIGGER)
    assert "before the drift 93.0 %" in chart.find_element("css selector", ".before-label").text
    assert_no_marker_crosses_a_level_label(browser)
    scroll_width, width, wider = browser.execute_script(OVERFLOW)
    assert scroll_width <= width and not wider, wider
    # No allocation yet: a sentence, not a table of headers.
    assert browser.find_element("id", "allocations-empty").is_displayed()
    assert not browser.find_element("id", "allocations").is_displayed()
    shot(browser, "curve", tmp_path)


@pytest.mark.slow
def test_the_overview_keeps_the_last_score_and_lists_stopped_deployments_last(
    site: Site, sized: Any
) -> None:
    browser = sized
    _login(browser, site.url, "token-carol")
    rows = _wait(browser, lambda b: b.find_elements("css selector", "#deployments tbody tr"))
    assert [r.get_attribute("data-deployment") for r in rows] == ["drift-cam", "old-cam"]
    # A window without labelled samples keeps the last score (and says how old it is).
    acc = rows[0].find_element("css selector", ".acc")
    assert acc.text == "91.0 %" and acc.get_attribute("data-level") == "ok"
    assert f"w{DRIFT_WINDOWS - 2}" in rows[0].find_element("css selector", ".scored-age").text
    health = '#health [data-health="deployments"]'
    card = _wait(browser, lambda b: b.find_element("css selector", health))
    assert card.get_attribute("data-level") == "ok"
    assert "1 of 1 accurate" in card.text and "not scored" not in card.text
    # The load column of an emulated site says so; live nodes are never called emulated.
    assert browser.find_element("id", "nodes-load").get_attribute("textContent") == (
        "CPU / GPU / memory (emulated)")  # fmt: skip
    live, emulated = {"source": "live"}, {"source": "emulated"}
    headings = [_import(browser, "nodes.js", "m.loadHeading(arguments[0])", nodes)
                for nodes in ([live, live], [live, emulated], [emulated])]  # fmt: skip
    assert headings == ["CPU / GPU / memory (measured)", "CPU / GPU / memory",
                        "CPU / GPU / memory (emulated)"]  # fmt: skip
    # A job's error without a message reads as its code alone, never "None" or "null".
    halted, failed = {"code": "HALTED", "message": ""}, {"code": "FAILED", "message": "exit 1"}
    errors = [_import(browser, "jobs.js", "m.errorText(arguments[0])", e)
              for e in (halted, failed, None)]  # fmt: skip
    assert errors == ["HALTED", "FAILED: exit 1", ""]


@pytest.mark.slow
def test_an_ekya_window_says_what_each_stream_retrained(site: Site, sized: Any) -> None:
    browser = sized
    _login(browser, site.url)
    stream, config = site.retrained
    summary = _wait(browser, lambda b: b.find_elements("css selector", "#windows .window-summary"))
    assert f"{stream} retrained with {config} (measured 68.0 %)" in summary[0].text
    assert "no stream retrained" not in summary[0].text
    rows = {r.get_attribute("data-stream"): r for r in
            browser.find_elements("css selector", "#windows tr[data-stream]")}  # fmt: skip
    assert f"retrained with {config}" in rows[stream].find_element("css selector", ".outcome").text
    others = [r for sid, r in rows.items() if sid != stream]
    assert others and all("retrained with" not in r.text for r in others)
    # The job's own page says the same.
    _go(browser, "#/jobs/" + site.jobs["ekya"][:8])
    _wait(browser, lambda b: f"retrained with {config}" in b.find_element("id", "job-result").text)
    assert "failed the gate" not in browser.find_element("id", "job-result").text


@pytest.mark.slow
def test_an_ekya_window_says_when_a_retrained_model_failed_the_gate(site: Site, sized: Any) -> None:
    browser = sized
    stream, config = site.retrained
    site.write_ekya_result(gate_passed=False)
    try:
        _login(browser, site.url)
        summary = _wait(browser, lambda b: b.find_elements("css selector", WINDOW_SUMMARY))
        assert (f"{stream} retrained with {config} (measured 68.0 %, failed the gate: not deployed)"
                in summary[0].text)  # fmt: skip
        row = browser.find_element("css selector", f'#windows tr[data-stream="{stream}"]')
        assert row.find_element("css selector", ".outcome").text.endswith(
            "; failed the gate against the deployed model (71.0 %): not deployed"
        )
    finally:
        site.write_ekya_result(gate_passed=True)


@pytest.mark.slow
def test_live_traffic_is_the_data_planes_figures(site: Site, sized: Any) -> None:
    browser = sized
    # A deployment without traffic, on a service without a data plane: no panel.
    _login(browser, site.url, fragment="#/deployments/yard-cam")
    _wait(browser, lambda b: _text(b, "#deployment-name") == "yard-cam"
          and b.find_elements("css selector", "#events li"))  # fmt: skip
    assert not browser.find_element("id", "traffic").is_displayed()

    _go(browser, "#/deployments/gate-cam")
    _wait(browser, lambda b: b.find_element("id", "traffic").is_displayed())
    with site.api() as api:
        answer = api.get("/v1/deployments/gate-cam/traffic", params={"span_s": 10}).json()
    traffic = answer["traffic"]
    assert traffic["requests"] == 10 * TRAFFIC_RPS and traffic["failed"] == 2
    cards = {k: v.split("\n") for k, v in browser.execute_script(TRAFFIC_CARDS).items()}
    assert cards["requests"] == ["requests", f"{TRAFFIC_RPS:.1f} /s", "200 over the last 10 s"]
    # Where each latency is measured: what a client sees at the ingress, and the replica's own.
    proxy, replica = traffic["latency_ms"]["proxy"], traffic["latency_ms"]["replica"]
    assert proxy["state"] == "complete" and proxy["mean"] == pytest.approx(51.0)
    assert replica["mean"] == pytest.approx(25.5)
    for card, part in (("latency at the ingress", proxy), ("latency in the replica", replica)):
        tail = f"p50; p95 {part['p95']:.1f} ms, p99 {part['p99']:.1f} ms"
        assert cards[card] == [card, f"{part['p50']:.1f} ms", tail]
        title = browser.find_element("css selector", f'#traffic .card[data-traffic="{card}"]')
        assert title.get_attribute("title") == "measured " + part["measured"]
    assert replica["p50"] < proxy["p50"] < proxy["p99"] and replica["p50"] < replica["p99"]
    assert cards["canary share"] == ["canary share", "0.0 %", "of routed requests"]
    assert cards["failed"] == ["failed", "2", "requests"]
    endpoint = _text(browser, "#traffic-endpoint")
    assert answer["endpoint"] in endpoint and f"(model {answer['model']})" in endpoint
    assert "the service runs no data plane" in endpoint


@pytest.mark.slow
def test_deep_links_to_deployments_jobs_and_nodes(site: Site, sized: Any, tmp_path: Path) -> None:
    browser = sized
    _login(browser, site.url, fragment="#/deployments/yard-cam")
    _wait(browser, lambda b: b.find_element("id", "deployment-name").text == "yard-cam")
    row = browser.find_element("css selector", '#deployments tr[data-deployment="yard-cam"]')
    assert "selected" in row.get_attribute("class")

    # A job by the 8 characters its row shows; its metrics, reported as it ran.
    _go(browser, "#/jobs/" + site.jobs["counter"][:8])
    _wait(browser, lambda b: "counter" in b.find_element("id", "job-name").text)
    metrics = _wait(browser, lambda b: "step 5" in b.find_element("id", "job-metrics").text
                    and b.find_element("id", "job-metrics"))  # fmt: skip
    assert len(metrics.find_elements("css selector", "tbody tr")) == 5
    assert "none yet" not in metrics.text
    assert (
        browser.find_element("id", "job-link")
        .get_attribute("href")
        .endswith("#/jobs/" + site.jobs["counter"])
    )
    shot(browser, "job", tmp_path)

    # A node's URL, opened as a fresh page of the same tab (the token stays in the tab).
    browser.get(site.url + DASHBOARD_PATH + "#/nodes/edge-1")
    detail = _wait(browser, lambda b: b.find_element("id", "node-detail").is_displayed()
                   and b.find_element("id", "node-detail"))  # fmt: skip
    _wait(browser, lambda b: "edge-cam v2 w0: inference 0.40 (r500)" in detail.text)
    # Choosing a row is a new URL; the back button returns to the node.
    browser.find_element("css selector", '#deployments tr[data-deployment="gate-cam"] td').click()
    _wait(browser, lambda b: b.execute_script("return location.hash") == "#/deployments/gate-cam")
    _wait(browser, lambda b: b.find_element("id", "deployment-name").text == "gate-cam")
    browser.back()
    _wait(browser, lambda b: b.execute_script("return location.hash") == "#/nodes/edge-1")
    assert browser.find_element("id", "node-detail").is_displayed()
    # A job id that is not the tenant's is said to be missing, not shown empty.
    _go(browser, "#/jobs/" + "0" * 32)
    _wait(browser, lambda b: "No job" in b.find_element("id", "job-error").text)


@pytest.mark.slow
def test_no_view_is_wider_than_the_window(site: Site, sized: Any) -> None:
    browser = sized
    browser.get(site.url + DASHBOARD_PATH)  # the login screen first
    _wait(browser, lambda b: b.find_element("id", "token").is_displayed())
    scroll_width, width, wider = browser.execute_script(OVERFLOW)
    assert scroll_width <= width and not wider, ("login", wider)
    _login(browser, site.url)
    views = {
        "overview": "#/",
        "edge deployment": "#/deployments/edge-cam",
        "chart": "#/deployments/gate-cam",
        "job": "#/jobs/" + site.jobs["ekya"],
        "node": "#/nodes/edge-1",
    }
    for view, fragment in views.items():
        _go(browser, fragment)
        _wait(browser, lambda b: b.find_elements("css selector", "#nodes tbody tr"))
        time.sleep(0.5)  # the view's reads
        scroll_width, width, wider = browser.execute_script(OVERFLOW)
        assert scroll_width <= width and not wider, (view, wider)
    # A job id is never broken across lines.
    _go(browser, "#/")
    ids = browser.find_elements("css selector", "#jobs .id, #deployments .id")
    assert ids
    for shown in ids:
        assert browser.execute_script("return arguments[0].getClientRects().length", shown) == 1
    # Every deployment's accuracy is on screen, not past its right edge.
    for cell in browser.find_elements("css selector", "#deployments tbody .acc"):
        box = _rect(browser, cell)
        assert box["width"] > 0 and box["right"] <= width


@pytest.fixture(scope="module")
def _site_to_stop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    built = Site(tmp_path_factory.mktemp("dying"))
    try:
        yield built
    finally:
        built.server.stop()


@pytest.fixture
def dying_site(_site_to_stop: Site) -> Site:
    """A site of its own, for the tests that stop its service: one per module (a site takes
    seconds to seed), its service running at each test's start."""
    server = _site_to_stop.server
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    return _site_to_stop


@pytest.mark.slow
def test_a_stopped_service_is_shown_unreachable_and_its_data_stale(
    dying_site: Site, sized: Any, tmp_path: Path
) -> None:
    browser = sized
    site = dying_site
    _login(browser, site.url)
    up = _wait(browser, lambda b: b.find_elements("css selector", "#nodes td .s-up"))[0]
    live_colour = browser.execute_script("return getComputedStyle(arguments[0]).color", up)
    assert live_colour == "rgb(26, 127, 55)"

    site.server.stop()
    banner = _wait(browser, lambda b: b.find_element("id", "connection-banner").is_displayed()
                   and b.find_element("id", "connection-banner"), 30)  # fmt: skip
    assert "unreachable" in banner.text and "may no longer be true" in banner.text
    assert _text(browser, "#connection") == "service unreachable"
    assert "stale" in browser.find_element("tag name", "body").get_attribute("class")
    service = browser.find_element("css selector", '#health [data-health="service"]')
    assert service.get_attribute("data-level") == "bad" and "unreachable" in service.text
    app = browser.find_element("id", "app")
    assert float(browser.execute_script("return getComputedStyle(arguments[0]).opacity", app)) < 0.7
    # The last answer stays (greyed out): nothing claims to be up in green any more.
    up = browser.find_elements("css selector", "#nodes td .s-up")[0]
    assert browser.execute_script("return getComputedStyle(arguments[0]).color", up) != live_colour
    assert browser.find_elements("css selector", "#deployments tbody tr")
    shot(browser, "unreachable", tmp_path)

    site.server.start()  # the same port: the page finds it again by itself
    _wait(
        browser, lambda b: b.execute_script("return document.body.dataset.connection") == "live", 90
    )
    assert not browser.find_element("id", "connection-banner").is_displayed()
    assert "stale" not in browser.find_element("tag name", "body").get_attribute("class")


@pytest.mark.slow
def test_stop_reasons_read_as_words(site: Site, sized: Any) -> None:
    """An update's stop reason: its value (the learner's), or an older result's enum name."""
    browser = sized
    _login(browser, site.url)
    for raw, words in (("max_epochs", "max epochs reached"), ("StopReason.MAX_EPOCHS",
                       "max epochs reached"), ("converged", "converged")):  # fmt: skip
        assert _import(browser, "format.js", "m.stopReason(arguments[0])", raw) == words
