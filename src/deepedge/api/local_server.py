"""The job service (:mod:`deepedge.api.server`) as a real child process on loopback.

For the service, control-plane and dashboard benchmarks (``deepedge.bench.service``,
``.controlplane``, ``.service_load``, ``.dashboard``) and the tests that need a live
server (API, CLI, recovery after ``kill -9``); like
:class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster` for Ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation
from deepedge.service.store import JobStore
from deepedge.service.uid_range import CLAIMS_DIR_ENV


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_tenant(
    settings: ServiceSettings, name: str, token: str, grants: tuple[str, ...] = (), **quota: float
) -> None:
    """Create a tenant straight in the store (what ``deepedge tenants create`` does: a grant
    that could not be given to its sandboxes is refused)."""
    from deepedge.core.errors import InvalidInputError
    from deepedge.service.sandbox import grant_problem

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for grant in grants:
        if (problem := grant_problem(grant, settings.data_dir)) is not None:
            raise InvalidInputError(f"grant {problem}", field="grants")
    store = JobStore(settings.url)
    store.migrate()
    settings.claim_uids(store)
    store.create_tenant(name, token, grants=grants, **quota)  # type: ignore[arg-type]
    store.dispose()


def make_operator_token(settings: ServiceSettings) -> str:
    """An operator token (``/metrics``), straight in the store."""
    from deepedge.service.tenants import TokenRole

    store = JobStore(settings.url)
    store.migrate()
    _, secret = store.tenancy.create_token(TokenRole.OPERATOR, tenant_id=None, label="local")
    store.dispose()
    return secret


@dataclass
class ServerProcess:
    """``python -m deepedge.api.server`` as a child process (its own session)."""

    settings: ServiceSettings
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> float:
        """Start (cold: a fresh process) and wait for ``/healthz``; seconds to the first 200."""
        command = [
            sys.executable,
            "-m",
            "deepedge.api.server",
            "--data-dir",
            str(self.settings.data_dir),
            "--port",
            str(self.port),
        ]
        if self.settings.database_url:
            command += ["--db", self.settings.database_url]
        if self.settings.isolation is Isolation.TRUSTED:
            command.append("--trusted-tenants")
        if self.settings.public_metrics:
            command.append("--public-metrics")
        if self.settings.serving:
            command += ["--data-plane", "--data-plane-host", self.settings.serving_host,
                        "--data-plane-port", str(self.settings.serving_port)]  # fmt: skip
        if self.settings.ray_address:
            command += ["--ray-address", self.settings.ray_address]
        if self.settings.control_workers != ServiceSettings.control_workers:
            command += ["--control-workers", str(self.settings.control_workers)]
        env = {**os.environ, CLAIMS_DIR_ENV: str(self.settings.uid_claims_dir)}
        self.log_path = self.settings.data_dir / "server.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        return self.wait_healthy(started, timeout_s)

    def wait_healthy(self, since: float, timeout_s: float = 60.0) -> float:
        """Poll ``/healthz`` until it answers 200; seconds from ``since`` (perf_counter)."""
        assert self.proc is not None
        deadline = since + timeout_s
        # A generous per-request timeout: on a loaded host a fresh API's first answers can
        # take seconds, and a poll that always gives up after 1 s would never see one.
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while time.perf_counter() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited early; see {self.log_path}")
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return time.perf_counter() - since
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
        raise TimeoutError(f"server not healthy after {timeout_s}s; see {self.log_path}")

    def service_pids(self, timeout_s: float = 30.0) -> list[int]:
        """The processes the supervisor forked: the API and the lifecycle manager."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            children = psutil.Process(self.proc.pid).children()
            if len(children) >= 2:
                return [child.pid for child in children]
            time.sleep(0.01)
        raise TimeoutError("the supervisor has not started its API and manager processes")

    def role_pids(self) -> dict[str, int]:
        """``{role: pid}`` of the running service's processes, as its supervisor records
        them (``supervisor``, ``api``, ``manager`` and, with the data plane on,
        ``dataplane``)."""
        from deepedge.api.server import ROLES_FILE

        try:
            raw = json.loads((self.settings.data_dir / ROLES_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): int(v) for k, v in raw.items()}

    def kill9_roles(self, *roles: str) -> list[int]:
        """SIGKILL the processes of ``roles`` (the supervisor forks new ones)."""
        pids = [pid for role, pid in self.role_pids().items() if role in roles]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def kill9_serving(self) -> list[int]:
        """SIGKILL the API and the manager processes (not the supervisor, which forks new
        ones): the whole service but its listening socket."""
        pids = self.service_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def kill9(self) -> None:
        """SIGKILL the whole service, supervisor and serving process (learners live on)."""
        if self.proc is not None:
            serving = psutil.Process(self.proc.pid).children()
            os.kill(self.proc.pid, signal.SIGKILL)
            for child in serving:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            self.proc.wait()

    def kill9_tree(self) -> list[int]:
        """SIGKILL every process the service started: the supervisor and everything under
        it (the API, the manager, the data plane's host with its Ray head, raylet, workers
        and HAProxies, learners), and any process whose command line names the data folder
        or one of the embedded head's folders (Ray's, HAProxy's). Each is stopped (SIGSTOP)
        first, until no new one appears, so that none sees another die and acts on it (a
        parent-death signal, a supervisor forking anew); then all are killed at once and
        waited for. Returns their pids."""
        from deepedge.service.embedded_ray import read_head

        head = read_head(self.settings.data_dir)
        marks = [str(self.settings.data_dir)]
        if head is not None:
            marks += [head.root, *([head.state_dir] if head.state_dir else [])]
        stopped: dict[int, psutil.Process] = {}
        while found := [p for p in _service_tree(self.proc, marks) if p.pid not in stopped]:
            for proc in found:
                with contextlib.suppress(psutil.Error):
                    proc.suspend()
                stopped[proc.pid] = proc
        for proc in stopped.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(list(stopped.values()), timeout=30)
        if self.proc is not None:
            self.proc.wait()
        return sorted(stopped)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()


def _service_tree(root: subprocess.Popen[bytes] | None, marks: list[str]) -> list[psutil.Process]:
    """The processes under ``root`` and those whose command line holds one of ``marks``
    (with theirs), never this process or its ancestors."""
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    tops: list[psutil.Process] = []
    if root is not None and root.poll() is None:
        with contextlib.suppress(psutil.Error):
            tops.append(psutil.Process(root.pid))
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if any(mark in line for mark in marks):
            tops.append(proc)
    found: dict[int, psutil.Process] = {}
    for top in tops:
        with contextlib.suppress(psutil.Error):
            for proc in [top, *top.children(recursive=True)]:
                found.setdefault(proc.pid, proc)
    return [p for pid, p in found.items() if pid not in spared]
