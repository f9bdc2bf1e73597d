"""Starting or joining Ray, and placing actors on devices.

Two ways to get a Ray runtime (:func:`ensure_ray`):

* **Embedded (the default).** ``ray.init(address="local", num_cpus=..., ...)`` starts a
  private Ray on this machine, listening on loopback only (:func:`loopback_node`).
  ``address="local"`` is explicit on purpose: without an address Ray attaches to the
  newest cluster that ``ray start`` created on the machine, so a stray cluster would
  capture the run (and the local-only ``num_cpus`` would then be refused). Every actor
  asks for 0 CPUs so that the emulated testbed (a PS, a data store and up to a handful
  of workers) fits on a 2-core host; the emulation paces the work.
* **Connect to a running cluster.** An address (``--address`` of a command, the
  service's ``ray_address``, or the ``RAY_ADDRESS`` environment variable) makes
  :func:`ensure_ray` call ``ray.init(address=...)`` with no local-only option (no
  ``num_cpus``, resources or system config: Ray refuses them when connecting). Like
  ``ray start --address``, it uses Ray's token authentication when a token is available
  and ``RAY_AUTH_MODE`` is unset (``ray.init`` with an explicit address would not).

On a cluster each device joins with its ``deepedge-node:<id>`` resource (``deepedge agent``,
:mod:`deepedge.runtime.cluster.node_agent`); :func:`actor_options` then pins an actor to that node
by asking for a sliver of that resource, and :func:`driver_node_options` pins one to the
driver's own node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray

from deepedge.core.errors import DependencyUnavailableError, InvalidInputError
from deepedge.runtime.cluster import ray_logs

log = logging.getLogger(__name__)

NODE_RESOURCE_PREFIX = "deepedge-node:"
ADDRESS_ENV = "RAY_ADDRESS"
LOCAL = "local"  # the address that means "start an embedded Ray here"
LOOPBACK = "127.0.0.1"
# Ray 2.60 has no bind address for its servers: its gRPC servers (GCS, raylet, object
# manager, every worker) listen on 127.0.0.1 when the node's IP is 127.0.0.1 and on every
# interface otherwise, its agents and metrics exporters likewise; and both `ray start
# --node-ip-address=127.0.0.1` and `ray.init(_node_ip_address=...)` turn a loopback address
# into the host's own (resolve_ip_for_localhost) unless Ray takes clusters to be off on
# this machine (its setting for Windows and macOS; `ray start --address` then refuses to
# join). A node started with this environment (and its processes, which inherit it) has
# 127.0.0.1 as its IP and listens on loopback only: what a single-node Ray is for. Its
# workers run bind_servers_on_node first (Ray's hook for a module's function at a worker's
# start), for the one server Ray Serve binds on every interface whatever the node.
LOOPBACK_NODE_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": (
        "deepedge.runtime.cluster.session.bind_servers_on_node"
    ),
}
_EVERY_INTERFACE = ("[::]", "::", "0.0.0.0", "")


def cluster_address(address: str | None = None) -> str | None:
    """The cluster to connect to: ``address``, else ``$RAY_ADDRESS``; None means embedded.

    ``"local"`` (from either source) also means embedded; ``"auto"`` is passed to Ray,
    which then looks for a cluster started on this machine.
    """
    chosen = address if address else os.environ.get(ADDRESS_ENV) or None
    if chosen is None or chosen.strip() == LOCAL:
        return None
    return chosen.strip()


GCS_PROBE_S = 3.0  # a head that does not accept a TCP connection by then is not there


def check_reachable(address: str, timeout_s: float = GCS_PROBE_S) -> None:
    """Fail fast when nothing listens at ``address`` (``HOST:PORT`` of the head's GCS).

    ``ray.init`` and Ray's GCS client retry an address that refuses or drops connections
    for minutes; one bounded TCP connection to the GCS port tells a wrong address in
    ``timeout_s``. ``auto`` and ``ray://`` addresses are left to Ray.
    """
    if address == "auto" or "://" in address:
        return
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidInputError(
            f"--address {address!r} is not HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379)",
            field="address",
        )
    try:
        socket.create_connection((host, int(port_text)), timeout=timeout_s).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        raise DependencyUnavailableError(
            f"no Ray cluster at {address}: a TCP connection to {host} port {port_text} "
            f"(the head's GCS) failed: {why} (tried for up to {timeout_s:g} s); check --address or "
            "RAY_ADDRESS: the head's HOST:PORT of `ray start --head --port`",
            address=address,
        ) from None


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_loopback(address: str) -> bool:
    """Whether ``HOST:PORT`` names this machine's loopback."""
    return is_loopback_host(address.rpartition(":")[0].strip("[]"))


def _authenticate_like_ray_start() -> None:
    """Use the token, as ``ray start --address`` does, when one exists and no mode is set."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def ensure_ray(num_cpus: int | None = None, address: str | None = None) -> bool:
    """Start an embedded Ray or connect to ``address`` unless Ray is up; True when this
    call started or connected it. ``num_cpus`` only sizes an embedded Ray."""
    if ray.is_initialized():
        return False
    ray_logs.divert()  # its start-up advice goes to the debug log, not the terminal
    target = cluster_address(address)
    if target is not None:
        check_reachable(target)
        _authenticate_like_ray_start()
        # A head on loopback listens there only: Ray must not swap 127.0.0.1 for the host's
        # address, as it does by default (LOOPBACK_NODE_ENV).
        on_loopback = loopback_node() if _is_loopback(target) else contextlib.nullcontext()
        with on_loopback:
            ray.init(address=target, log_to_driver=False, configure_logging=False)
        ray_logs.divert()  # ray.init cleared the "ray" logger's handlers
        log.info("connected to the Ray cluster at %s", target)
        return True
    cpus = num_cpus if num_cpus is not None else max(1, min(4, os.cpu_count() or 1))
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _children()
        try:
            with patient_raylet_wait(), loopback_node():
                ray.init(
                    address=LOCAL,
                    num_cpus=cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            break
        except Exception as exc:  # Ray raises a bare Exception for this one
            if STARTUP_TIMEOUT not in str(exc) or attempt == START_ATTEMPTS:
                raise
            log.warning("the embedded Ray did not start (attempt %d of %d: %s); again",
                        attempt, START_ATTEMPTS, exc)  # fmt: skip
            _stop_failed_start(before)
    ray_logs.divert()
    log.info("started a local Ray with %d CPUs", cpus)
    return True


START_ATTEMPTS = 3
# Ray waits a fixed 30 s for a new raylet to register (RAY_RAYLET_WAIT_S), which a loaded
# machine can miss even when stretched to RAYLET_WAIT_S; the start is then tried again from
# scratch (a job's learner would otherwise lose an attempt).
STARTUP_TIMEOUT = "timed out during startup"
RAY_RAYLET_WAIT_S = 30.0  # hard-coded in ray._private.node.Node
RAYLET_WAIT_S = 150.0  # what this module lets a raylet take to register


class _PatientClock:
    """``time`` as Ray's node module sees it during a start: everything is the real
    module's but :func:`monotonic`, which runs ``rate`` times as fast from the moment the
    clock is made, so a fixed wait of ``w`` seconds there lasts ``w / rate`` seconds."""

    def __init__(self, real: Any, rate: float) -> None:
        self._real, self._rate = real, rate
        self._origin = real.monotonic()

    def monotonic(self) -> float:
        return self._origin + (self._real.monotonic() - self._origin) * self._rate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextmanager
def patient_raylet_wait(wait_s: float = RAYLET_WAIT_S) -> Iterator[None]:
    """Let a starting raylet take ``wait_s`` to register instead of Ray's fixed 30 s.

    The raylet registers only once its Python agents are up, about 2.5 s of imports on an
    idle 2-core host; on one that serves traffic while it retrains (a site's edge server,
    the demo, a loaded CI machine) that measured over 30 s, and ``ray.init`` gave up on a
    raylet that was still starting. Ray has no setting for that wait, so for the duration
    of the block its node module's clock runs ``30 / wait_s`` as fast (:class:`_PatientClock`);
    a Ray whose node module no longer reads the ``time`` module is left as it is.
    """
    import time

    from ray._private import node as ray_node

    if getattr(ray_node, "time", None) is not time:
        yield
        return
    ray_node.time = _PatientClock(time, RAY_RAYLET_WAIT_S / wait_s)  # type: ignore[assignment]
    try:
        yield
    finally:
        ray_node.time = time


def bind_servers_on_node() -> None:
    """In a worker, before any actor runs: a gRPC server that Ray code binds on every
    interface binds on the worker's node address instead.

    Ray Serve 2.60 starts an inter-deployment gRPC server in every replica on ``[::]:0``
    (hard-coded; proxies and routers call the replica's methods through it, with pickled
    arguments), through ``ray._common.tls_utils.add_port_to_grpc_server``, which Serve's
    replica module imports by name when it is first imported: after this hook on a worker.
    Its callers reach a replica at its node's address, so nothing else changes."""
    from ray._common import tls_utils

    bind = tls_utils.add_port_to_grpc_server

    def on_node(server: Any, address: str) -> int:
        return int(bind(server, node_address(address, ray.util.get_node_ip_address())))

    tls_utils.add_port_to_grpc_server = on_node


def node_address(address: str, node: str) -> str:
    """``address`` (``HOST:PORT``) with a host that means every interface replaced by
    ``node``; any other host is kept."""
    host, _, port = address.rpartition(":")
    if host not in _EVERY_INTERFACE:
        return address
    return f"[{node}]:{port}" if ":" in node else f"{node}:{port}"


@contextmanager
def loopback_node() -> Iterator[None]:
    """For an embedded ``ray.init`` in the block: a node on 127.0.0.1 that listens on
    loopback only (:data:`LOOPBACK_NODE_ENV`): Ray's constant read in this process, the
    environment for the processes the start spawns (they pass it on to their workers)."""
    from ray._private import ray_constants

    saved_env = {k: os.environ.get(k) for k in LOOPBACK_NODE_ENV}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ.update(LOOPBACK_NODE_ENV)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def _stop_failed_start(before: set[int]) -> None:
    """Kill what a failed embedded start left running: the processes this process has
    spawned since the start began (``before``: its children then)."""
    import psutil

    with contextlib.suppress(Exception):
        ray.shutdown()
    for child in psutil.Process().children(recursive=True):
        if child.pid not in before:
            with contextlib.suppress(psutil.Error):
                child.kill()


def shutdown_ray() -> None:
    """Disconnect from (or stop the embedded) Ray if this process is connected."""
    if ray.is_initialized():
        ray.shutdown()


@contextmanager
def ray_session(num_cpus: int | None = None, address: str | None = None) -> Iterator[None]:
    """Ray for the duration of the block; shut down (or disconnected) only if this block
    started it."""
    started = ensure_ray(num_cpus, address)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def alive_node_resources(address: str) -> set[str]:
    """The ``deepedge-node:`` resources of the nodes the cluster's GCS reports alive."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    _authenticate_like_ray_start()
    client = GcsClient(address=address)
    alive: set[str] = set()
    for info in client.get_all_node_info(timeout=10).values():
        if info.state != 0:  # GcsNodeInfo.ALIVE
            continue
        alive.update(k for k in info.resources_total if k.startswith(NODE_RESOURCE_PREFIX))
    return alive


def node_resource(node_id: str) -> str:
    """The custom resource a deepedge node advertises: ``deepedge-node:<id>``."""
    return NODE_RESOURCE_PREFIX + node_id


NODE_ID_LABEL = "deepedge.node-id"
DEVICE_TYPE_LABEL = "deepedge.device-type"
# Ray's (and Kubernetes') syntax of a label value: what a node id must be to label a raylet.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


def node_labels(node_id: str, device_type: str | None = None) -> dict[str, str]:
    """The Ray node labels of a deepedge node's raylet (``ray start --labels``), so that
    ``ray status``, ``ray list nodes --detail`` and the dashboard name its device."""
    if not _LABEL_VALUE.fullmatch(node_id):
        raise InvalidInputError(
            f"node id {node_id!r}: use letters, digits, '-', '_' or '.' (at most 63, "
            "starting and ending with a letter or digit)",
            field="id",
        )
    labels = {NODE_ID_LABEL: node_id}
    if device_type is not None:
        labels[DEVICE_TYPE_LABEL] = device_type
    return labels


def labels_option(labels: dict[str, str]) -> str:
    """``--labels=k1=v1,k2=v2`` for ``ray start``."""
    return "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items())


def actor_options(node_id: str | None = None) -> dict[str, Any]:
    """Ray options of an actor: pinned to ``node_id``'s node when the cluster names it."""
    options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1}
    if node_id is not None:
        resource = node_resource(node_id)
        if resource in ray.cluster_resources():
            options["resources"] = {resource: 0.001}
    return options


def actor_node_id(handle: Any) -> str | None:
    """The Ray node an actor runs on (hex id), from the GCS's actor table."""
    from ray._private import state

    info = state.actors(actor_id=handle._actor_id.hex())
    node = (info or {}).get("Address", {}).get("NodeID")
    return str(node) if node else None


def driver_node_options() -> dict[str, Any]:
    """:func:`actor_options` pinned to the node this driver runs on (hard affinity)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    return {
        **actor_options(),
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    }


def ray_nodes_by_node_id() -> dict[str, str]:
    """deepedge node id -> the alive Ray node (hex id) advertising its resource."""
    out: dict[str, str] = {}
    for node in ray.nodes():
        if node["Alive"]:
            for resource in node["Resources"]:
                if resource.startswith(NODE_RESOURCE_PREFIX):
                    out[resource.removeprefix(NODE_RESOURCE_PREFIX)] = node["NodeID"]
    return out


def alive_actor_nodes(class_prefix: str) -> dict[str, list[str]]:
    """The alive actors whose class name starts with ``class_prefix`` (Serve replicas are
    ``ServeReplica:<app>:<deployment>``), from the GCS's actor table: class name -> the
    Ray node of each."""
    from ray._private import state

    out: dict[str, list[str]] = {}
    for info in state.actors().values():
        name = info.get("ActorClassName", "")
        if info.get("State") == "ALIVE" and name.startswith(class_prefix):
            out.setdefault(name, []).append(info["Address"]["NodeID"])
    return out
