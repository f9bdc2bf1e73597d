"""An in-process API (FastAPI TestClient) over a fresh SQLite store with two tenants; for the
dashboard's browser tests, a live service on loopback and Debian's headless chromium.

CI installs chromium and chromium-driver (``scripts/system-deps.sh``, run by ``make test``);
there a missing browser fails the browser tests. Elsewhere they skip, naming what to install.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from deepedge.api.app import create_app
from deepedge.api.local_server import ServerProcess
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore


@pytest.fixture
def client(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The service's data folder apart from ``tmp_path``, which alice is granted (her
    workloads are written there: a grant may never hold the data folder)."""
    data_dir = tmp_path_factory.mktemp("service")
    tmp_path.chmod(0o755)  # readable by her sandbox's user, as a granted folder must be
    settings = ServiceSettings(data_dir=data_dir, tick_s=0.05, halt_grace_s=1.0)
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("alice", "token-alice", max_active_jobs=2, max_cores=2, max_queued_jobs=5,
                        grants=[str(tmp_path)])  # fmt: skip
    store.create_tenant("bob", "token-bob")
    store.dispose()
    with TestClient(create_app(settings), base_url="http://localhost") as test_client:
        yield test_client


def _end_learners_of(data_dir: Path) -> None:
    """Learners outlive the service by design (their collectors keep the logs and exit
    codes); a test ends its own: every process whose command line names its data folder,
    their children, and the Ray processes a learner started (their session folder ends in
    the learner's pid)."""
    roots = [p for p in psutil.process_iter(["cmdline"])
             if str(data_dir) in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    family: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            family.update({p.pid: p for p in [root, *root.children(recursive=True)]})
    sessions = [re.compile(rf"session_[0-9_-]+_{pid}\b") for pid in family]
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if "ray" in line and any(s.search(line) for s in sessions):
            family[p.pid] = p
    for p in family.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(family.values()), timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _browser_paths() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    found = (("chromium", browser), ("chromium-driver", driver))
    missing = [name for name, path in found if not path]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip, the dev extra)")
    if missing:
        reason = f"needs {', '.join(missing)}: run scripts/system-deps.sh / make setup"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    assert browser is not None and driver is not None
    return browser, driver


def _two_tenant_server(settings: ServiceSettings) -> Iterator[ServerProcess]:
    """A real service on ``settings`` with tenants alice and bob; stopped, learners ended."""
    settings.data_dir.mkdir()
    store = JobStore(settings.url)
    store.migrate()
    settings.claim_uids(store)  # (as `deepedge tenants create` does)
    store.create_tenant("alice", "token-alice")
    store.create_tenant("bob", "token-bob")
    store.dispose()
    process = ServerProcess(settings)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        _end_learners_of(settings.data_dir)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from _two_tenant_server(ServiceSettings(data_dir=tmp_path / "data"))


@pytest.fixture
def live_site(tmp_path: Path) -> Iterator[ServerProcess]:
    """:func:`live_server` with the data plane on (its own Ray head and Ray Serve)."""
    from deepedge.api.local_server import free_port

    yield from _two_tenant_server(
        ServiceSettings(data_dir=tmp_path / "data", serving=True, serving_port=free_port())
    )


VIEWPORT = "return [window.innerWidth, window.innerHeight]"
VIEWPORT_TRIES = 5
FRAME_PX = 200  # room for the window's frame beyond the largest viewport asked for


def chromium(width: int, height: int) -> Any:
    """Headless chromium whose viewport is ``width`` x ``height`` CSS pixels: started at
    least that large and a frame more (a window grown after the start stays within its
    first screen), then set to the size (a window started narrower than 500 pixels is
    widened to 500), its frame added."""
    binary, driver_path = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    screen_w, screen_h = max(width, 1280) + FRAME_PX, max(height, 1000) + FRAME_PX
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
                     f"--window-size={screen_w},{screen_h}"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    # The window's size counts a frame around the page: add what the viewport lost to it.
    # A resize may land after the next script runs on a loaded machine: measure again until
    # the viewport is the size asked for (or give up and let the caller's check say so).
    outer_w, outer_h = width, height
    for _ in range(VIEWPORT_TRIES):
        driver.set_window_size(outer_w, outer_h)
        inner_w, inner_h = driver.execute_script(VIEWPORT)
        if (inner_w, inner_h) == (width, height):
            break
        outer_w, outer_h = outer_w + width - inner_w, outer_h + height - inner_h
        time.sleep(0.2)
    return driver


def fresh_tab(driver: Any) -> Any:
    """``driver`` in a new tab, every other tab closed: the test's page starts with no
    sessionStorage (no token of an earlier test logged in) and no history, and the earlier
    page, its refresh timers with it, is gone. A tab is a fraction of a second; a chromium
    start takes seconds."""
    earlier = driver.window_handles
    driver.switch_to.new_window("tab")
    fresh = driver.current_window_handle
    for handle in earlier:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(fresh)
    return driver


@pytest.fixture(scope="module")
def _module_browser() -> Iterator[Any]:
    driver = chromium(1280, 1000)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(_module_browser: Any) -> Any:
    """Headless chromium (one per module), the test in a fresh tab of its own."""
    return fresh_tab(_module_browser)


VIEWPORTS = {"1440x900": (1440, 900), "390x844": (390, 844)}


@pytest.fixture(scope="module", params=list(VIEWPORTS), ids=list(VIEWPORTS))
def _module_sized_browser(request: pytest.FixtureRequest) -> Iterator[tuple[Any, list[int]]]:
    width, height = VIEWPORTS[request.param]
    driver = chromium(width, height)
    try:
        yield driver, [width, height]
    finally:
        driver.quit()


@pytest.fixture
def sized_browser(_module_sized_browser: tuple[Any, list[int]]) -> Any:
    """Headless chromium at a wide screen's and at a phone's viewport (VIEWPORTS), one per
    module and viewport, the test in a fresh tab of its own."""
    driver, size = _module_sized_browser
    fresh_tab(driver)
    assert driver.execute_script(VIEWPORT) == size
    return driver
