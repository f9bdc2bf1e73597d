"""Dashboard page load: ``python -m deepedge.bench.dashboard [--url U --token T] [--loads N]``.

One page load is everything the dashboard fetches before its first full render, in the
order the page does it: ``GET /dashboard`` (the page, one response), the login check
(``GET /v1/jobs?limit=1``), then its first refresh, concurrently as a browser sends it:
``/v1/jobs?limit=50``, ``/v1/host``, ``/v1/nodes``, ``/v1/deployments``, and, when the
tenant has a deployment, that deployment's ``windows``, ``events`` and ``versions``. Each
load opens fresh connections (a cold tab), so connection set-up is counted. An endpoint
answering 404 (not on this service) still costs its round trip, as in the page.

With ``--browser`` the same loads are also made by Debian's headless chromium (Selenium):
a load is then a navigation to the page, the token already in the tab's sessionStorage,
until the page has rendered its first refresh (``performance.now()`` at that moment, which
counts from the navigation's start: parsing, script, the reads and the DOM work included).

Without ``--url`` it starts a fresh service on loopback with one tenant and a few finished
jobs. :func:`measure_page_loads` is what other benchmarks call (the control plane's).

Last line: ``RESULT loads=... dashboard_p50_ms=... dashboard_p95_ms=... page_bytes=...``
(and ``browser_p50_ms=... browser_p95_ms=...`` with ``--browser``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from deepedge.api.dashboard import DASHBOARD_PATH
from deepedge.api.local_server import ServerProcess
from deepedge.bench.harness.http import bearer
from deepedge.bench.harness.site import Tenant, start_service
from deepedge.service.config import ServiceSettings

FIRST_REFRESH = ("/v1/jobs?limit=50", "/v1/host", "/v1/nodes", "/v1/deployments")
DEPLOYMENT_PARTS = ("windows?limit=200", "events?limit=200", "versions")


async def _one_load(url: str, token: str) -> tuple[float, int]:
    """Seconds for one cold page load, and the page's size in bytes."""
    headers = bearer(token)
    # The client is built before the clock starts (building it loads TLS settings, which a
    # browser tab never redoes); its connections open inside the measured time.
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30.0) as client:
        started = time.perf_counter()
        page = await client.get(DASHBOARD_PATH)
        page.raise_for_status()
        (await client.get("/v1/jobs?limit=1", headers=headers)).raise_for_status()
        answers = await asyncio.gather(*(client.get(p, headers=headers) for p in FIRST_REFRESH))
        deployments = answers[-1]
        if deployments.status_code == 200 and deployments.json().get("deployments"):
            name = deployments.json()["deployments"][0]["name"]
            base = f"/v1/deployments/{name}/"
            await asyncio.gather(*(client.get(base + p, headers=headers) for p in DEPLOYMENT_PARTS))
        return time.perf_counter() - started, len(page.content)


def measure_page_loads(url: str, token: str, loads: int = 100) -> tuple[list[float], int]:
    """``loads`` page loads one after another: their durations (s) and the page's bytes."""
    durations: list[float] = []
    size = 0
    for _ in range(loads):
        seconds, size = asyncio.run(_one_load(url, token))
        durations.append(seconds)
    return durations, size


def measure_browser_loads(url: str, token: str, loads: int = 100) -> list[float]:
    """``loads`` navigations of headless chromium to the page, each until its first complete
    render (seconds). Needs chromium, chromium-driver and selenium."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        driver.get(url + DASHBOARD_PATH)
        driver.execute_script("sessionStorage.setItem('deepedge.token', arguments[0])", token)
        durations = []
        for _ in range(loads):
            driver.get(url + DASHBOARD_PATH)
            rendered = WebDriverWait(driver, 30).until(
                lambda d: d.execute_script("return document.body.dataset.firstRenderMs")
            )
            durations.append(float(rendered) / 1e3)
        return durations
    finally:
        driver.quit()


def _fresh_service(root: Path, token: str) -> ServerProcess:
    server = start_service(ServiceSettings(data_dir=root / "data"), [Tenant("bench", token)])
    manifest = {"name": "hello", "kind": "command", "resources": {"cpus": 0.5},
                "spec": {"argv": [sys.executable, "-c", "print('hello')"]}}  # fmt: skip
    with httpx.Client(base_url=server.url, trust_env=False) as client:
        for _ in range(5):
            client.post("/v1/jobs", json=manifest, headers=bearer(token))
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.dashboard")
    parser.add_argument("--url", default=None, help="a running service (default: start one)")
    parser.add_argument("--token", default="bench-token", help="a tenant token of that service")
    parser.add_argument("--loads", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="20 loads")
    parser.add_argument("--browser", action="store_true", help="also load it in chromium")
    args = parser.parse_args(argv)
    loads = 20 if args.quick else args.loads
    with tempfile.TemporaryDirectory(prefix="deepedge-bench-dashboard-") as tmp:
        server = None if args.url else _fresh_service(Path(tmp), args.token)
        url = args.url or (server.url if server else "")
        try:
            measure_page_loads(url, args.token, 3)  # warm the service's own caches
            durations, size = measure_page_loads(url, args.token, loads)
            in_browser = measure_browser_loads(url, args.token, loads) if args.browser else []
        finally:
            if server is not None:
                server.stop()
    ms = np.asarray(durations) * 1e3
    p50, p95 = np.percentile(ms, [50, 95])
    print(f"dashboard page loads: {loads}; ms p50 {p50:.1f} p95 {p95:.1f} max {ms.max():.1f}")
    result = (
        f"RESULT loads={loads} dashboard_p50_ms={p50:.1f} dashboard_p95_ms={p95:.1f} "
        f"page_bytes={size}"
    )
    if in_browser:
        b50, b95 = np.percentile(np.asarray(in_browser) * 1e3, [50, 95])
        print(f"in headless chromium, to the first complete render: ms p50 {b50:.1f} p95 {b95:.1f}")
        result += f" browser_p50_ms={b50:.1f} browser_p95_ms={b95:.1f}"
    print(result)


if __name__ == "__main__":
    main()
