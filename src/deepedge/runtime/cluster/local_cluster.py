"""A real multi-node Ray cluster on one machine: a head and N raylets, for tests and benches.

Every node is its own ``ray start --block`` process (a process group of its own) with

* its own ``--temp-dir`` under one private directory (nodes that shared a session
  directory would share the plasma store's socket and fail to start),
* its own loopback address (``127.0.0.1`` for the head, ``127.0.0.2``... for the others;
  all of ``127/8`` is loopback on Linux), so that a driver on this machine attaches to the
  head's raylet and never to a node that a test stops; a head without other nodes (the
  data plane's embedded head) listens on loopback only
  (:data:`~deepedge.runtime.cluster.session.LOOPBACK_NODE_ENV`), while Ray binds every server of
  a cluster's nodes, the head's included, on every interface (it has no bind address for a
  node whose IP is not 127.0.0.1, and a raylet joining a head on 127.0.0.1 looks for it
  at this host's address instead),
* the head's metrics exporters on ports of its own (Ray's are fixed: 44217, 44227),
* its own ports, probed free before the start, and a small CPU count,
* its ``deepedge-node:<id>`` resource (:func:`deepedge.runtime.cluster.session.node_resource`)
  and its ``deepedge.node-id`` Ray node label
  (:func:`~deepedge.runtime.cluster.session.node_labels`).

Ray's token authentication is used as ``ray start --head`` would use it: the mode is set
explicitly (``RAY_AUTH_MODE=token`` for every node and for this process) because a bare
``ray start --address`` does not pick a token up by itself.

:meth:`LocalRayCluster.stop_node` kills one node's raylet (SIGKILL), the way a device
dies; :meth:`LocalRayCluster.stop` tears everything down: the process groups, then any
process whose command line still names the private directory (Ray's workers), then the
directory. It never runs ``ray stop``, which would stop every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from deepedge.core.errors import DependencyUnavailableError, InvalidInputError
from deepedge.runtime.cluster.session import (
    LOOPBACK,
    LOOPBACK_NODE_ENV,
    alive_node_resources,
    labels_option,
    node_labels,
    node_resource,
)

log = logging.getLogger(__name__)

HEAD_ID = "head"
_PORTS_PER_NODE = 48  # 8 named ports + a worker-port range of 40
_WORKER_PORTS = 40
START_ATTEMPTS = 2


@dataclass(frozen=True)
class NodePorts:
    """The ports one node binds (probed free together)."""

    base: int

    @property
    def node_manager(self) -> int:
        return self.base

    @property
    def object_manager(self) -> int:
        return self.base + 1

    def head_env(self) -> dict[str, str]:
        """The head's own metrics servers (Ray's defaults are fixed ports, 44217 and 44227,
        that a second head on the machine could not bind)."""
        return {"AUTOSCALER_METRIC_PORT": str(self.base + 6),
                "DASHBOARD_METRIC_PORT": str(self.base + 7)}  # fmt: skip

    def args(self) -> list[str]:
        b = self.base
        return [
            f"--node-manager-port={b}",
            f"--object-manager-port={b + 1}",
            f"--dashboard-agent-listen-port={b + 2}",
            f"--dashboard-agent-grpc-port={b + 3}",
            f"--runtime-env-agent-port={b + 4}",
            f"--metrics-export-port={b + 5}",
            f"--min-worker-port={b + 8}",
            f"--max-worker-port={b + 8 + _WORKER_PORTS - 1}",
        ]


@dataclass
class LocalNode:
    node_id: str
    ip: str
    ports: NodePorts
    temp_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    stopped: bool = False


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port_block(size: int, taken: set[int], rng: random.Random) -> int:
    """A base port whose ``size`` ports are all free on every interface (and not ``taken``)."""
    for _ in range(200):
        base = rng.randrange(20000, 59000 - size)
        block = range(base, base + size)
        if any(p in taken for p in block):
            continue
        if all(_free("0.0.0.0", p) for p in block):
            taken.update(block)
            return base
    raise DependencyUnavailableError("found no free block of ports for a local Ray node")


def terminate_with_parent() -> None:
    """In a child before it runs: SIGTERM it when the thread that started it dies (Linux's
    ``PR_SET_PDEATHSIG``; ``ray start --block`` stops its node on SIGTERM), so a node never
    outlives its owner, even one killed with SIGKILL."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def _ray_command() -> list[str]:
    """``ray`` as this module runs it: Ray's CLI with a patient raylet wait
    (:mod:`deepedge.runtime.cluster.ray_start`), in this interpreter."""
    _ray_executable()  # (Ray must be installed: a clear error if not)
    return [sys.executable, "-m", "deepedge.runtime.cluster.ray_start"]


def _ray_executable() -> str:
    here = Path(sys.executable).parent / "ray"
    found = str(here) if here.exists() else shutil.which("ray")
    if not found:
        raise DependencyUnavailableError("the `ray` command is not installed")
    return found


def ensure_token_auth(env: dict[str, str]) -> None:
    """Token authentication for this process and ``env``: a token must exist (made if not)."""
    from ray._private.authentication.authentication_token_setup import (
        _enable_token_auth,
        _get_default_token_path,
        generate_and_save_token,
    )

    given = os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
    if not given and not _get_default_token_path().exists():
        generate_and_save_token()
    _enable_token_auth()  # sets RAY_AUTH_MODE=token here and re-reads Ray's config
    env["RAY_AUTH_MODE"] = "token"


@dataclass
class LocalRayCluster:
    """A head plus ``worker_ids`` raylets on this machine (module docstring); a context manager."""

    worker_ids: tuple[str, ...] = ("n1", "n2", "n3")
    cpus_per_node: int = 1
    node_cpus: dict[str, int] = field(default_factory=dict)  # a node's own, over cpus_per_node
    object_store_mb: int = 80
    start_timeout_s: float = 180.0
    base_dir: Path | None = None
    seed: int | None = None
    die_with_parent: bool = False  # every node stops when the process that started it dies
    extra_env: dict[str, str] = field(default_factory=dict)  # for every node and its workers
    nodes: dict[str, LocalNode] = field(default_factory=dict)
    gcs_port: int = 0
    _root: Path | None = None
    _env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment its nodes run with (a driver needs its authentication mode)."""
        return dict(self._env)

    @property
    def root(self) -> Path:
        assert self._root is not None
        return self._root

    def __enter__(self) -> LocalRayCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> LocalRayCluster:
        """Start the head, then every raylet (in parallel); wait until all are alive.

        A start that fails (a probed port taken in the meantime, a node that exits) is torn
        down and tried once more on other ports."""
        if len(set(self.worker_ids)) != len(self.worker_ids) or HEAD_ID in self.worker_ids:
            raise InvalidInputError("node ids must be unique and not 'head'", field="worker_ids")
        for attempt in range(START_ATTEMPTS):
            seed = None if self.seed is None else self.seed + attempt
            try:
                return self._start_once(random.Random(seed))
            except DependencyUnavailableError as exc:
                if attempt + 1 == START_ATTEMPTS:
                    raise
                log.warning("the local Ray cluster did not start (%s); trying other ports", exc)
        raise AssertionError("unreachable")

    def _start_once(self, rng: random.Random) -> LocalRayCluster:
        self.nodes = {}
        # Short: Ray's Unix socket paths under the temp dir must stay under 107 bytes.
        self._root = Path(tempfile.mkdtemp(prefix="deray-", dir=self.base_dir or "/tmp"))
        self._env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **self.extra_env}
        self._env.pop("RAY_ADDRESS", None)
        ensure_token_auth(self._env)
        taken: set[int] = set()
        try:
            self.gcs_port = free_port_block(2, taken, rng)
            head = self._node(HEAD_ID, LOOPBACK, taken, rng)
            self._launch(
                head,
                [
                    "--head",
                    f"--port={self.gcs_port}",
                    f"--ray-client-server-port={self.gcs_port + 1}",
                    "--include-dashboard=false",
                ],
                {**(LOOPBACK_NODE_ENV if not self.worker_ids else {}), **head.ports.head_env()},
            )
            self._wait_for_gcs()
            # a raylet that joins before the head's has registered gives up after ~20 s
            # ("No node info found for head node"), which a loaded machine can take
            self._wait_until_alive([HEAD_ID])
            for k, wid in enumerate(self.worker_ids, start=2):
                self._launch(
                    self._node(wid, f"127.0.0.{k}", taken, rng), [f"--address={self.address}"]
                )
            self._wait_until_alive()
        except BaseException:
            self.stop()
            raise
        return self

    def _node(self, node_id: str, ip: str, taken: set[int], rng: random.Random) -> LocalNode:
        node = LocalNode(
            node_id=node_id,
            ip=ip,
            ports=NodePorts(free_port_block(_PORTS_PER_NODE, taken, rng)),
            temp_dir=self.root / node_id,
        )
        node.temp_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[node_id] = node
        return node

    def _launch(self, node: LocalNode, extra: list[str], env: dict[str, str] | None = None) -> None:
        node.log_path = self.root / f"{node.node_id}.log"
        args = [
            *_ray_command(),
            "start",
            "--block",
            "--disable-usage-stats",
            *extra,
            f"--node-ip-address={node.ip}",
            f"--num-cpus={self.node_cpus.get(node.node_id, self.cpus_per_node)}",
            "--num-gpus=0",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
            f"--temp-dir={node.temp_dir}",
            f"--resources={json.dumps({node_resource(node.node_id): 1})}",
            labels_option(node_labels(node.node_id)),
            *node.ports.args(),
        ]
        with node.log_path.open("wb") as out:
            node.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env={**self._env, **(env or {})},
                start_new_session=True,
                preexec_fn=terminate_with_parent if self.die_with_parent else None,
            )  # fmt: skip
        log.info("started Ray node %s (%s, pid %d)", node.node_id, node.ip, node.process.pid)

    def _check_running(self) -> None:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is not None and not node.stopped:
                tail = node.log_path.read_text(errors="replace")[-2000:] if node.log_path else ""
                raise DependencyUnavailableError(
                    f"Ray node {node.node_id} exited during start-up:\n{tail}"
                )

    def _wait_for_gcs(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self._check_running()
            try:
                socket.create_connection(("127.0.0.1", self.gcs_port), timeout=1.0).close()
                return
            except OSError:
                time.sleep(0.2)
        raise DependencyUnavailableError(
            f"the Ray head did not listen within {self.start_timeout_s} s"
        )

    def _wait_until_alive(self, node_ids: list[str] | None = None) -> None:
        wanted = {node_resource(n) for n in (self.nodes if node_ids is None else node_ids)}
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            self._check_running()
            try:
                if wanted <= alive_node_resources(self.address):
                    return
            except Exception as exc:  # the GCS may still be starting
                log.debug("GCS not ready: %s", exc)
            time.sleep(0.5)
        raise DependencyUnavailableError(
            f"the local Ray cluster had not every node alive within {self.start_timeout_s} s"
        )

    def raylet_pid(self, node_id: str) -> int | None:
        node = self.nodes[node_id]
        if node.process is None:
            return None
        try:
            children = psutil.Process(node.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        for child in children:
            try:
                if child.name() == "raylet":
                    return child.pid
            except psutil.NoSuchProcess:
                continue
        return None

    def stop_node(self, node_id: str) -> None:
        """Kill ``node_id``'s raylet (SIGKILL), as when the device dies; its workers follow."""
        if node_id == HEAD_ID:
            raise InvalidInputError("stopping the head stops the cluster", field="node_id")
        node = self.nodes[node_id]
        pid = self.raylet_pid(node_id)
        node.stopped = True
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            log.info("killed the raylet of %s (pid %d)", node_id, pid)

    def stop(self) -> None:
        """Stop every node of this cluster and remove its directory (idempotent)."""
        procs = [n.process for n in self.nodes.values() if n.process is not None]
        tree: list[psutil.Process] = []  # raylets' workers rename themselves ray::...
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                tree += psutil.Process(proc.pid).children(recursive=True)
        for proc in reversed(procs):  # workers first, the head last
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5.0
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("Ray node process %d did not exit", proc.pid)
        for child in tree:
            with contextlib.suppress(psutil.Error):
                child.kill()
        if self._root is not None:
            self.kill_leftovers(str(self._root))
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
        for node in self.nodes.values():
            node.process = None

    @staticmethod
    def kill_leftovers(marker: str) -> None:
        """SIGKILL processes whose command line names this cluster's directory (Ray workers)."""
        me = os.getpid()
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                cmdline = proc.info["cmdline"] or []
                if proc.info["pid"] != me and any(marker in part for part in cmdline):
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
