"""Node agents and the node registry of a live Ray cluster (``deepedge agent``).

* :class:`NodeRegistry` is one detached, named actor on the head node
  (``deepedge-node-registry`` in namespace ``deepedge``). It keeps a
  :class:`~deepedge.cluster.reports.NodeBook` on its own clock: a node whose heartbeats
  stop for ``lost_after_s`` is LOST.
* :class:`NodeAgentActor` runs on its device (pinned by the device's
  ``deepedge-node:<id>`` resource). A sampler thread measures the node
  (:class:`deepedge.cluster.metrics.NodeAgent`); every ``heartbeat_s`` the agent sends a
  :class:`~deepedge.cluster.reports.NodeReport` (X = P95 of the period's samples, device
  type, memory, latency-critical apps with deadlines). :meth:`NodeAgentActor.profile` runs
  the profiler and the AutoML fit on the device itself, so learned models are per device
  type.
* :func:`run_agent` is ``deepedge agent``: it joins the cluster when the node's resource
  is not there yet (a ``ray start --address HEAD --block`` child it owns and stops on
  exit, labelled with the node's id and device type), connects, starts the agent actor
  (refused while another agent holds the id) and keeps it alive until a signal. SIGTERM
  or SIGINT drains the node first (:mod:`deepedge.runtime.cluster.node_drain`), then leaves. The
  agent actor belongs to that process: when the process or the node dies, heartbeats stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import psutil
import ray

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.metrics import NodeAgent as MetricsSampler
from deepedge.cluster.metrics import percentile_state
from deepedge.cluster.reports import AppReport, NodeBook, NodeReport, NodeView
from deepedge.core.errors import (
    ConflictError,
    DependencyUnavailableError,
    InvalidInputError,
    NotFoundError,
    RunFailedError,
)
from deepedge.runtime.cluster import ray_logs
from deepedge.runtime.cluster.node_drain import DEFAULT_DRAIN_TIMEOUT_S, drain_node
from deepedge.runtime.cluster.session import (
    alive_node_resources,
    check_reachable,
    cluster_address,
    ensure_ray,
    labels_option,
    node_labels,
    node_resource,
)

log = logging.getLogger(__name__)

NAMESPACE = "deepedge"
REGISTRY_NAME = "deepedge-node-registry"
AGENT_NAME_PREFIX = "deepedge-agent:"
HEAD_RESOURCE = "node:__internal_head__"
DEFAULT_HEARTBEAT_S = 1.0
DEFAULT_LOST_AFTER_S = 3.0
AGENT_SHARE = 0.001  # of its node's deepedge-node resource: what pins the agent there


class NodeRegistry:
    """The registry actor: heartbeats in, the nodes' latest reports and statuses out."""

    def __init__(self, lost_after_s: float = DEFAULT_LOST_AFTER_S) -> None:
        self._book = NodeBook(lost_after_s)

    def heartbeat(self, report: NodeReport) -> None:
        self._book.record(report, time.monotonic())

    def leave(self, node_id: str) -> None:
        self._book.leave(node_id, time.monotonic())

    def drain(self, node_id: str) -> None:
        self._book.drain(node_id, time.monotonic())

    def views(self) -> list[NodeView]:
        return self._book.views(time.monotonic())

    def alive(self) -> list[NodeReport]:
        return self._book.alive(time.monotonic())

    def not_alive(self, node_ids: list[str]) -> set[str]:
        return self._book.not_alive(node_ids, time.monotonic())

    def lost_after_s(self) -> float:
        return self._book.lost_after_s


def registry(lost_after_s: float = DEFAULT_LOST_AFTER_S) -> Any:
    """The cluster's registry actor, created on the head node by the first caller."""
    return (
        ray.remote(NodeRegistry)
        .options(
            name=REGISTRY_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            resources={HEAD_RESOURCE: 0.001},
            max_restarts=-1,
        )
        .remote(lost_after_s)
    )


def parse_app(text: str) -> AppReport:
    """``kind:deadline_s[:name]`` (e.g. ``sift:0.2``) -> an :class:`AppReport`."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise InvalidInputError(f"an app is kind:deadline_s[:name], got {text!r}", field="app")
    try:
        kind = AppKind(parts[0])
        deadline_s = float(parts[1])
    except ValueError as exc:
        raise InvalidInputError(f"bad app {text!r}: {exc}", field="app") from exc
    if not deadline_s > 0:
        raise InvalidInputError(f"an app's deadline must be > 0, got {text!r}", field="app")
    return AppReport(
        name=parts[2] if len(parts) == 3 else kind.value, kind=kind, deadline_s=deadline_s
    )


class NodeAgentActor:
    """The agent on one device: measures it and reports on a heartbeat (module docstring)."""

    def __init__(
        self,
        node_id: str,
        device: DeviceType,
        apps: Sequence[AppReport],
        heartbeat_s: float,
        mem_capacity_frac: float,
        registry_handle: Any,
    ) -> None:
        self.node_id = node_id
        self.device = device
        self.apps = tuple(apps)
        self.heartbeat_s = heartbeat_s
        self.mem_capacity_frac = mem_capacity_frac
        self._registry = registry_handle
        self._seq = 0
        self._ray_node_id = ray.get_runtime_context().get_node_id()
        self._sampler = MetricsSampler(period_s=min(0.25, heartbeat_s / 2)).start()
        self._sampler.wait_for_samples(1, timeout_s=10 * heartbeat_s + 5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()

    def report(self) -> NodeReport:
        """The node's report now: the state over the last heartbeat period."""
        since = time.monotonic() - max(self.heartbeat_s, 0.5)
        samples = self._sampler.samples(since_s=since) or self._sampler.samples()[-1:]
        total_mb = psutil.virtual_memory().total / 2**20
        self._seq += 1
        return NodeReport(
            node_id=self.node_id,
            device=self.device,
            state=percentile_state(samples),
            mem_total_mb=total_mb,
            mem_capacity_mb=self.mem_capacity_frac * total_mb,
            apps=self.apps,
            ray_node_id=self._ray_node_id,
            hostname=socket.gethostname(),
            seq=self._seq,
        )

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self._registry.heartbeat.remote(self.report())
            except Exception:  # a registry restart: the next beat goes through
                log.warning("heartbeat of %s failed", self.node_id, exc_info=True)
            self._stop.wait(self.heartbeat_s)

    def ping(self) -> str:
        return self._ray_node_id

    def stop(self) -> None:
        """Stop the heartbeat and tell the registry this node leaves."""
        self._stop.set()
        self._thread.join(timeout=5 * self.heartbeat_s + 1)
        self._sampler.stop()
        ray.get(self._registry.leave.remote(self.node_id))

    def profile(self, out_dir: str, quick: bool = True, budget_s: float | None = None) -> str:
        """Profile this device and fit its learned models into ``out_dir/<device>/models``.

        Runs ``deepedge profile`` and ``deepedge perfmodels fit`` here, on the device; returns
        the device's directory (``load_performance_model`` reads it).
        """
        target = Path(out_dir) / self.device.value
        profile_cmd = [
            sys.executable,
            "-m",
            "deepedge",
            "profile",
            "--out",
            str(target),
            "--device",
            self.device.value,
        ]
        if quick:
            profile_cmd.append("--quick")
        if budget_s is not None:
            profile_cmd += ["--budget-s", str(budget_s)]
        fit_cmd = [sys.executable, "-m", "deepedge", "perfmodels", "fit", str(target)]
        if quick:
            fit_cmd.append("--quick")
        for cmd in (profile_cmd, fit_cmd):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RunFailedError(
                    f"{' '.join(cmd[3:5])} failed on {self.node_id}: {done.stderr[-500:]}"
                )
        return str(target)


def registered_nodes() -> list[NodeView]:
    """What the cluster's registry knows of every node (Ray must be connected)."""
    try:
        reg = ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    except ValueError:
        raise NotFoundError("no deepedge agent has reported to this cluster") from None
    views: list[NodeView] = ray.get(reg.views.remote())
    return views


def profile_on_node(node_id: str, out: str, quick: bool) -> str:
    """Ask ``node_id``'s agent to profile its device and fit its models under ``out``
    (a path on that node); where the models were written (Ray must be connected)."""
    try:
        handle: Any = ray.get_actor(AGENT_NAME_PREFIX + node_id, namespace=NAMESPACE)
    except ValueError:
        raise NotFoundError(f"no agent runs for node {node_id!r}") from None
    where: str = ray.get(handle.profile.remote(out, quick))
    return where


def start_agent(
    node_id: str,
    device: DeviceType,
    apps: Iterable[AppReport] = (),
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    lost_after_s: float = DEFAULT_LOST_AFTER_S,
    mem_capacity_frac: float = 0.9,
) -> Any:
    """Start the agent actor of ``node_id`` on its node (Ray must be connected); a
    :class:`ConflictError` while another agent holds ``node_id``."""
    resource = node_resource(node_id)
    if resource not in ray.cluster_resources():
        raise InvalidInputError(f"no Ray node advertises {resource}", field="id")
    check_id_free(node_id)
    try:
        handle: Any = (
            ray.remote(NodeAgentActor)
            .options(
                name=AGENT_NAME_PREFIX + node_id,
                namespace=NAMESPACE,
                num_cpus=0,
                resources={resource: AGENT_SHARE},
                max_concurrency=4,
                max_restarts=0,
            )
            .remote(
                node_id, device, tuple(apps), heartbeat_s, mem_capacity_frac, registry(lost_after_s)
            )
        )
    except ValueError as exc:  # the name was taken since the check
        raise _duplicate(node_id, "another agent") from exc
    ray.get(handle.ping.remote())  # started: its first heartbeat is on its way
    return handle


def check_id_free(node_id: str) -> None:
    """Raise :class:`ConflictError` when a live agent already reports as ``node_id``."""
    try:
        other: Any = ray.get_actor(AGENT_NAME_PREFIX + node_id, namespace=NAMESPACE)
    except ValueError:
        return
    try:
        ray_node = str(ray.get(other.ping.remote(), timeout=10))
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return  # a dead agent: Ray frees its name
    host = next((v.report.hostname for v in registered_views() if v.report.node_id == node_id), "")
    where = f"an agent on host {host or 'unknown'} (Ray node {ray_node[:12]})"
    raise _duplicate(node_id, where)


def _duplicate(node_id: str, where: str) -> ConflictError:
    return ConflictError(
        f"node {node_id} is already registered by {where}; pick another --id or stop that "
        "agent (SIGTERM: it drains and leaves)",
        node_id=node_id,
    )


def registered_views() -> list[NodeView]:
    """:func:`registered_nodes`, or nothing when no registry exists yet."""
    try:
        return registered_nodes()
    except NotFoundError:
        return []


def ray_executable() -> str:
    """Ray's ``ray`` command of this environment (else the one on the PATH)."""
    ray_bin = Path(sys.executable).parent / "ray"
    return str(ray_bin) if ray_bin.exists() else "ray"


def join_cluster(
    address: str,
    node_id: str,
    ray_start_args: Sequence[str] = (),
    timeout_s: float = 120.0,
    device: DeviceType | None = None,
) -> tuple[subprocess.Popen[bytes], Path | None]:
    """Start this device's raylet (``ray start --address --block``) with its node resource
    and its Ray node labels (``deepedge.node-id``, ``deepedge.device-type``; a
    ``--labels`` among ``ray_start_args`` comes later and wins); the process, and the file
    its output is appended to (:func:`~deepedge.runtime.cluster.ray_logs.ray_start_log_path`;
    None when that cannot be written, and then the output is the agent's own). A ``ray
    start`` that exits is refused with its last line of output."""
    labels = node_labels(node_id, None if device is None else device.value)
    args = [
        ray_executable(),
        "start",
        "--block",
        f"--address={address}",
        f"--resources={json.dumps({node_resource(node_id): 1})}",
        labels_option(labels),
        *ray_start_args,
    ]
    wanted = ray_logs.ray_start_log_path(node_id)
    out = _append_to(wanted)
    path = wanted if out is not None else None
    start = out.tell() if out is not None else 0
    try:
        proc = subprocess.Popen(
            args, start_new_session=True, stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
        )  # fmt: skip
    finally:
        if out is not None:
            out.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DependencyUnavailableError(
                f"`ray start` exited with {proc.returncode}{_last_line(path, start)}"
            )
        try:
            if node_resource(node_id) in alive_node_resources(address):
                return proc, path
        except Exception as exc:
            log.debug("cluster not answering yet: %s", exc)
        time.sleep(0.5)
    stop_process_group(proc)
    raise DependencyUnavailableError(
        f"this node did not join {address} within {timeout_s} s{_last_line(path, start)}"
    )


def _append_to(path: Path) -> IO[bytes] | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("ab")
    except OSError:
        return None


def _last_line(path: Path | None, start: int) -> str:
    """``: LINE (all of it in PATH)`` for what ``ray start`` wrote from ``start`` on."""
    if path is None:
        return ""
    try:
        with path.open("rb") as written:
            written.seek(start)
            lines = [ln.strip() for ln in written.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    said = [ln for ln in lines if ln]
    return (f": {said[-1][:300]}" if said else "") + f" (all of its output: {path})"


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _note(on_note: Any, line: str) -> None:
    """Tell the operator (``on_note``, the command's), else the log."""
    if on_note is not None:
        on_note(line)
    else:
        log.info("%s", line)


def _drain_then_leave(
    agent: Any, node_id: str, lost_after_s: float, drain_timeout_s: float, on_note: Any
) -> None:
    """Drain ``node_id`` (a second signal cuts it short), then leave the registry."""
    _note(on_note, f"node {node_id} drains: no new work; waiting up to {drain_timeout_s:g} s")
    try:
        outcome = drain_node(registry(lost_after_s), node_id, drain_timeout_s,
                             own_share=AGENT_SHARE)  # fmt: skip
        _note(on_note, outcome.describe())
    except _Stop:
        _note(on_note, f"node {node_id}: a second signal, leaving without waiting for its work")
    ray.get(agent.stop.remote(), timeout=30)
    ray.kill(agent)
    _note(on_note, f"node {node_id} left the cluster")


def run_agent(
    address: str | None,
    node_id: str,
    device: DeviceType,
    apps: Sequence[AppReport] = (),
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    lost_after_s: float = DEFAULT_LOST_AFTER_S,
    join: bool = True,
    ray_start_args: Sequence[str] = (),
    on_ready: Any = None,
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
    on_note: Any = None,
) -> int:
    """``deepedge agent``: join (if needed), start the agent, serve until a signal.

    Returns 0 after SIGINT/SIGTERM (the node drained, at most ``drain_timeout_s``, and
    left; a second signal cuts the drain short), 1 when the agent actor died (its node
    was lost). ``on_note(line)`` hears the drain's decisions.
    """
    target = cluster_address(address)
    if target is None:
        raise InvalidInputError("an agent needs --address (or RAY_ADDRESS)", field="address")
    if not heartbeat_s > 0 or not lost_after_s > heartbeat_s:
        raise InvalidInputError("need 0 < heartbeat_s < lost_after_s", field="heartbeat_s")
    if not drain_timeout_s >= 0:
        raise InvalidInputError("need drain_timeout_s >= 0", field="drain_timeout_s")
    labels = node_labels(node_id, device.value)  # a bad id fails before anything starts
    check_reachable(target)
    raylet: subprocess.Popen[bytes] | None = None
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, _raise_stop) for s in stops}
    try:
        if join and node_resource(node_id) not in alive_node_resources(target):
            raylet, said = join_cluster(target, node_id, ray_start_args, device=device)
            if said is not None:
                _note(on_note, f"node {node_id} joined {target}; `ray start` writes to {said}")
        ensure_ray(address=target)
        for sig in stops:  # ray.init installs its own SIGTERM handler: ours goes back on top
            signal.signal(sig, _raise_stop)
        agent = start_agent(node_id, device, apps, heartbeat_s, lost_after_s)
        log.info("agent %s runs with labels %s", node_id, labels)
        if on_ready is not None:
            on_ready(node_id)
        try:
            while True:
                ray.get(agent.ping.remote(), timeout=max(30.0, 10 * heartbeat_s))
                time.sleep(heartbeat_s)
        except _Stop:
            _drain_then_leave(agent, node_id, lost_after_s, drain_timeout_s, on_note)
            return 0
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            log.error("the agent of %s died: %s", node_id, exc)
            return 1
    except _Stop:
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if ray.is_initialized():
            ray.shutdown()
        if raylet is not None:
            stop_process_group(raylet)
