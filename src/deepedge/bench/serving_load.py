"""Load for ``bench.serving``: wrk for the sustained rate, an open-loop generator for
latency and for the runs that count answers, and CPU accounting per process.

* :func:`wrk_rate` runs Debian's ``wrk`` (C, one thread, ``connections`` kept busy) against
  the infer route with a camera's request (one image, binary tensor extension) for
  ``seconds``: the sustained rate, and wrk's own CPU seconds (from the child's rusage).
* :class:`OpenLoop` sends requests on a fixed schedule (``rate`` per second, whether or not
  earlier ones were answered: no coordinated omission) and records, per request, its
  scheduled time, latency from that schedule, status, served version, route, request id
  and whether its sample was acknowledged.
* :func:`cpu_seconds` sums user+system CPU of the processes whose command line matches a
  pattern (Ray's actors name themselves ``ray::<Class>``), to split a run's CPU by hop.
* :func:`measured_latency` reads the data plane's own latency figures of a span from the
  traffic route: at its ingress (what a client sees) and inside the replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from deepedge.core.errors import DependencyUnavailableError

_LUA = """
wrk.method = "POST"
local f = io.open("{body}", "rb")
wrk.body = f:read("*all")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = "{header}"
wrk.headers["Authorization"] = "Bearer {key}"
"""


@dataclass(frozen=True)
class WrkRun:
    connections: int
    seconds: float
    requests: int
    rps: float
    errors: int  # non-2xx answers and socket errors
    cpu_s: float  # wrk's own user+system CPU


def wrk_rate(url: str, body: bytes, header_length: int, key: str, connections: int,
             seconds: float) -> WrkRun:  # fmt: skip
    wrk = shutil.which("wrk")
    if wrk is None:
        raise DependencyUnavailableError("wrk is not installed (Debian: apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="deepedge-wrk-") as tmp:
        body_file = Path(tmp) / "body.bin"
        body_file.write_bytes(body)
        script = Path(tmp) / "post.lua"
        script.write_text(_LUA.format(body=body_file, header=header_length, key=key))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [wrk, "-t1", f"-c{connections}", f"-d{seconds:.0f}s", "--timeout", "10s",
             "-s", str(script), url],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = done.stdout
    if done.returncode != 0 or "Requests/sec" not in out:
        raise DependencyUnavailableError(f"wrk failed: {done.stderr.strip() or out[-300:]}")
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = 0
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        errors += int(bad.group(1))
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    if sockets:
        errors += sum(int(x) for x in sockets.groups())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return WrkRun(connections, seconds, total, rps, errors, cpu)


@dataclass
class Reply:
    """One request of the open loop: its schedule, latency from it, and the answer."""

    scheduled: float  # monotonic seconds
    latency_ms: float
    status: int  # 0: no answer (connection error, timeout)
    version: str | None = None
    route: str | None = None
    request_id: str | None = None
    sampled: bool = False


@dataclass
class OpenLoop:
    """Open-loop requests to ``url`` (see the module docstring), run in a thread."""

    url: str
    body: bytes
    headers: dict[str, str]
    rate: float
    timeout_s: float = 30.0
    answers: list[Reply] = field(default_factory=list)
    cpu_s: float = 0.0  # this generator thread's own CPU seconds
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, seconds: float | None = None) -> OpenLoop:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(seconds)),
                                        daemon=True, name="open-loop")  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> list[Reply]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 30)
        return self.answers

    def wait(self) -> list[Reply]:
        if self._thread is not None:
            self._thread.join()
        return self.answers

    async def _run(self, seconds: float | None) -> None:
        import aiohttp

        cpu0 = time.thread_time()
        connector = aiohttp.TCPConnector(limit=512)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        tasks: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            start = time.monotonic()
            k = 0
            while not self._stop.is_set():
                at = start + k / self.rate
                if seconds is not None and at - start >= seconds:
                    break
                delay = at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self._one(session, at))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                k += 1
            if tasks:
                await asyncio.wait(tasks, timeout=self.timeout_s)
        self.cpu_s = time.thread_time() - cpu0

    async def _one(self, session: Any, scheduled: float) -> None:
        import aiohttp

        try:
            async with session.post(self.url, data=self.body, headers=self.headers) as r:
                payload = await r.read()
                latency = (time.monotonic() - scheduled) * 1000
                if r.status != 200:
                    self.answers.append(Reply(scheduled, latency, r.status))
                    return
                answer = json.loads(payload[: int(r.headers.get(
                    "Inference-Header-Content-Length", len(payload)))])  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, ValueError):
            self.answers.append(Reply(scheduled, (time.monotonic() - scheduled) * 1000, 0))
            return
        params = answer.get("parameters", {})
        self.answers.append(Reply(scheduled, latency, 200, answer.get("model_version"),
                                   params.get("route"), params.get("request_id"),
                                   bool(params.get("sampled"))))  # fmt: skip


def cpu_seconds(match: Callable[[str], bool]) -> float:
    """User+system CPU seconds so far of every process whose command line ``match``es."""
    total = 0.0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if match(line):
                times = proc.cpu_times()
                total += times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def hop_latency(
    urls: tuple[str, str], headers: dict[str, str], pairs: int, body: bytes | None = None
) -> tuple[float, float]:
    """The median latency (ms) of ``pairs`` requests (a POST of ``body``, else a GET) to
    each of two URLs, one request at a time, in the order A B B A A B ... (both see the same
    moments of the machine), each URL on one kept-alive connection of its own; answers
    other than 200 are left out."""
    import http.client
    import statistics
    from urllib.parse import urlsplit

    connections = []
    for url in urls:
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        connections.append((connection, parts.path))
    times: tuple[list[float], list[float]] = ([], [])
    try:
        for i in range(2 * pairs):
            which = (i + i // 2) % 2
            connection, path = connections[which]
            started = time.perf_counter()
            connection.request("GET" if body is None else "POST", path, body, headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status == 200:
                times[which].append((time.perf_counter() - started) * 1000)
    finally:
        for connection, _ in connections:
            connection.close()
    return tuple(statistics.median(t) if t else float("nan") for t in times)  # type: ignore[return-value]


def ray_process(name: str) -> Callable[[str], bool]:
    """Matches a Ray worker running actor or task ``name`` (its title ``ray::<name>...``)."""
    return lambda line: line.startswith("ray::") and name in line


def measured_latency(client: Any, deployment: str, span_s: float) -> dict[str, float]:
    """The data plane's latency quantiles (ms) of the last ``span_s`` seconds as
    ``GET /v1/deployments/NAME/traffic`` gives them: ``proxy_*`` at its ingress, ``replica_*``
    inside the replicas (-1 for a figure it does not have); ``proxy_covered`` is the share
    of the span the ingress's figures cover."""
    answer = client.get(f"/v1/deployments/{deployment}/traffic?span_s={span_s:.0f}")
    latency = answer["traffic"]["latency_ms"]
    values = {f"{where}_{q}_ms": -1.0 if latency[where][q] is None else float(latency[where][q])
              for where in ("proxy", "replica") for q in ("p50", "p95", "p99")}  # fmt: skip
    proxy = latency["proxy"]
    values["proxy_covered"] = proxy["covered_s"] / proxy["span_s"] if proxy["span_s"] else 0.0
    return values


def ingress_hop(
    site: Any, body: bytes, headers: dict[str, str], pairs: int
) -> tuple[float, float]:
    """What the data plane's ingress adds to a camera's request and to a model's ``ready``
    on ``site`` (``bench.serving``'s site: its data folder and inference key; ms, medians;
    that module's docstring, 9); -1 each when Serve's own port is not known."""
    from deepedge.bench.isolation_host import haproxy_ports
    from deepedge.service.embedded_ray import read_head

    record, ports = read_head(site.data_dir), dict[str, int]()
    if record is not None and record.state_dir is not None:
        with contextlib.suppress(OSError):
            ports = haproxy_ports(Path(record.state_dir))
    serve = ports.get("frontend http_frontend")
    if serve is None:
        print("the ingress's hop: not measured (Serve's port is not known)")
        return -1.0, -1.0
    added = []
    for route, sent, extra in (("infer", body, headers), ("ready", None, {})):
        through = site.key.route(route)
        direct = through.replace(site.key.base_url, f"http://127.0.0.1:{serve}", 1)
        ms = hop_latency((through, direct), {**extra, **site.key.auth()}, pairs, sent)
        print(f"the ingress's hop, {route}: p50 {ms[0]:.2f} ms through it, {ms[1]:.2f} ms "
              f"straight to Serve behind it ({pairs} requests each, alternating, one at a "
              "time)")  # fmt: skip
        added.append(ms[0] - ms[1])
    return added[0], added[1]
