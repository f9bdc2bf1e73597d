"""The nodes of a live cluster on the dashboard, in headless chromium at 1440x900 and at phone
width (390x844): a service run with ``--ray-address`` whose node watcher's snapshot the test
writes (no Ray: the API reads only that file), with one node alive and one lost.

* live nodes are never called emulated (the load column reads "(measured)");
* every load bar carries its number ("CPU 43 %");
* a lost node's bars are greyed and its state says since when ("lost since HH:MM:SS (N s
  ago)"), on its row and on its page, which names its last figures as such;
* a node's page names its Ray node's address and host;
* nothing is wider than the window.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _api_helpers import OVERFLOW

from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess, free_port
from deepedge.cluster.live_nodes import LiveNode, LiveNodes, NodeResources, write_snapshot
from deepedge.cluster.reports import NodeStatus
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

WAIT_S = 60.0
LOST_FOR_S = 75.0
GREY = "rgb(175, 184, 193)"  # a lost node's bars (dashboard.css)
ACCENT = "rgb(11, 99, 197)"  # a CPU bar's fill (--accent)


class Cluster:
    """A service on a Ray address where nothing listens, fed a fresh snapshot every second
    (as its node watcher would write one) until stopped."""

    def __init__(self, root: Path) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.settings = ServiceSettings(data_dir=root / "data", ray_address=self.address)
        self.settings.data_dir.mkdir(parents=True)
        store = JobStore(self.settings.url)
        store.migrate()
        self.settings.claim_uids(store)
        store.create_tenant("alice", "token-alice")
        store.dispose()
        self.lost_at = time.time() - LOST_FOR_S
        self.server = ServerProcess(self.settings)
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._write, daemon=True)

    def snapshot(self) -> LiveNodes:
        def node(name: str, ray: str, address: str, lost: bool) -> LiveNode:
            return LiveNode(
                node_id=name, status=NodeStatus.LOST if lost else NodeStatus.ALIVE,
                device="jetson-nano", age_s=LOST_FOR_S + 3 if lost else 0.5, cpu_util=0.43,
                gpu_util=None, mem_util=0.5, mem_total_mb=4096.0, ray_node_id=ray,
                hostname=f"host-{name}", address=address,
                lost_at=self.lost_at if lost else None,
                resources=NodeResources(cpus=4.0, memory_mb=2500.0, object_store_mb=700.0),
            )  # fmt: skip

        return LiveNodes(
            taken_at=time.time(), ray_address=self.address,
            nodes=[node("nano-1", "a1b2c3d4e5f6" + "0" * 44, "10.0.0.2", False),
                   node("nano-2", "ffeeddccbbaa" + "1" * 44, "10.0.0.3", True)],
        )  # fmt: skip

    def _write(self) -> None:
        while not self._stop.is_set():
            write_snapshot(self.settings.data_dir, self.snapshot())
            self._stop.wait(1.0)

    def start(self) -> None:
        write_snapshot(self.settings.data_dir, self.snapshot())
        self._writer.start()
        self.server.start()

    def stop(self) -> None:
        self._stop.set()
        self.server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    built = Cluster(tmp_path_factory.mktemp("cluster"))
    built.start()
    try:
        yield built
    finally:
        built.stop()


def _wait(browser: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S).until(condition)


def _row(browser: Any, name: str) -> Any:
    return browser.find_element("css selector", f'#nodes tr[data-node="{name}"]')


def _text(browser: Any, css: str) -> str:
    return str(browser.find_element("css selector", css).text)


def _colour(browser: Any, element: Any, prop: str) -> str:
    return str(browser.execute_script(f"return getComputedStyle(arguments[0]).{prop}", element))


@pytest.mark.slow
def test_a_lost_node_is_greyed_and_says_since_when(cluster: Cluster, sized_browser: Any) -> None:
    browser = sized_browser
    browser.get(cluster.server.url + DASHBOARD_PATH)
    browser.find_element("id", "token").send_keys("token-alice")
    browser.find_element("id", "login-button").click()
    _wait(browser, lambda b: b.find_elements("css selector", '#nodes tr[data-node="nano-2"]'))

    # Live nodes are never called emulated (they were headed "(emulated)").
    heading = browser.find_element("id", "nodes-load").get_attribute("textContent")
    assert heading == "CPU / GPU / memory (measured)"
    assert "emulated" not in _text(browser, "body").lower()
    alive, lost = _row(browser, "nano-1"), _row(browser, "nano-2")
    figures = [f.text for f in alive.find_elements("css selector", ".load-figure")]
    assert figures == ["CPU 43 %", "memory 50 %"]  # no GPU: no GPU figure
    cpu = alive.find_element("css selector", '[data-load="cpu"] .bar > span')
    assert _colour(browser, cpu, "backgroundColor") == ACCENT
    assert "gone" not in alive.get_attribute("class")

    assert "gone" in lost.get_attribute("class")
    for fill in lost.find_elements("css selector", ".bar > span"):
        assert _colour(browser, fill, "backgroundColor") == GREY
    state = lost.find_element("css selector", ".lost-since").text
    stamp = time.strftime("%H:%M:%S", time.localtime(cluster.lost_at))
    found = re.fullmatch(rf"lost since {stamp} \((\d+) s ago\)", state)
    assert found, state
    assert LOST_FOR_S <= int(found.group(1)) < LOST_FOR_S + WAIT_S
    assert not lost.find_elements("css selector", 'a[href*="#/jobs/"]')

    # Its page: since when, and its figures named as its last report; the alive node's
    # page names its Ray node's address and host.
    browser.execute_script("location.hash = arguments[0]", "#/nodes/nano-2")
    body = "#node-body"
    detail = _wait(browser, lambda b: "lost since " + stamp in _text(b, body)
                   and b.find_element("css selector", body))  # fmt: skip
    assert "last reported load" in detail.text and "measured load" not in detail.text
    scroll_width, width, wider = browser.execute_script(OVERFLOW)
    assert scroll_width <= width and not wider, wider
    browser.execute_script("location.hash = arguments[0]", "#/nodes/nano-1")
    _wait(browser, lambda b: "10.0.0.2" in _text(b, body))
    shown = _text(browser, body)
    assert "host-nano-1" in shown and "measured load" in shown and "lost since" not in shown
    assert "emulated" not in shown.lower()

    browser.execute_script("location.hash = arguments[0]", "#/")
    time.sleep(0.5)  # the view's reads
    scroll_width, width, wider = browser.execute_script(OVERFLOW)
    assert scroll_width <= width and not wider, wider
