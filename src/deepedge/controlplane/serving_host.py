"""The data plane's host: the process of the service that keeps the data plane running.

``deepedge serve`` (with the data plane on) runs this as one of its supervised processes,
beside the API and the manager. It

1. gets a Ray cluster: the one named by the service's Ray address, or an embedded head of
   its own on this machine (:class:`~deepedge.runtime.local_cluster.LocalRayCluster` with no
   workers; its address and folder are recorded in ``<data-dir>/dataplane/head.json``, so a
   restarted host re-attaches to a head that is still up instead of starting another);
2. starts the data plane there (:func:`deepedge.runtime.dataplane.start_data_plane`: Ray
   Serve's HTTP proxy on the configured address, the controller reading the serving table
   from this service's store, the sample writer on this machine's disk);
3. watches: a head that dies is started again (and the data plane with it, from the store).

The API and the manager never talk to Ray for serving: if either crashes, Serve goes on
answering. When the service stops (or its supervisor is gone) the embedded head stops too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

from deepedge.controlplane.serving import TableSource
from deepedge.dataplane.sample_store import sample_store_path
from deepedge.service.config import ServiceSettings

log = logging.getLogger(__name__)

HEAD_FILE = Path("dataplane") / "head.json"
WATCH_S = 2.0


@dataclass(frozen=True)
class HeadRecord:
    """An embedded head as recorded on disk (enough to re-attach to it or stop it)."""

    address: str
    root: str
    pid: int
    env: dict[str, str]

    def alive(self) -> bool:
        host, _, port = self.address.rpartition(":")
        if not psutil.pid_exists(self.pid):
            return False
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except OSError:
            return False
        return True


def _head_file(settings: ServiceSettings) -> Path:
    return settings.data_dir / HEAD_FILE


def read_head(settings: ServiceSettings) -> HeadRecord | None:
    try:
        raw = json.loads(_head_file(settings).read_text())
        return HeadRecord(raw["address"], raw["root"], int(raw["pid"]), dict(raw["env"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stop_head(record: HeadRecord) -> None:
    """Stop a recorded head and everything that runs from its folder."""
    from deepedge.runtime.local_cluster import LocalRayCluster

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGTERM)
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
        psutil.Process(record.pid).wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGKILL)
    LocalRayCluster.kill_leftovers(record.root)
    shutil.rmtree(record.root, ignore_errors=True)


def start_head(settings: ServiceSettings) -> HeadRecord:
    """A fresh embedded head (any recorded one is stopped first), recorded on disk."""
    from deepedge.runtime.local_cluster import HEAD_ID, LocalRayCluster

    old = read_head(settings)
    if old is not None:
        stop_head(old)
    cluster = LocalRayCluster(
        worker_ids=(),
        cpus_per_node=settings.serving_cpus or os.cpu_count() or 1,
        object_store_mb=settings.serving_object_store_mb,
    ).start()
    process = cluster.nodes[HEAD_ID].process
    assert process is not None
    record = HeadRecord(cluster.address, str(cluster.root), process.pid,
                        {"RAY_AUTH_MODE": cluster.env.get("RAY_AUTH_MODE", "")})  # fmt: skip
    path = _head_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record.__dict__))
    os.replace(tmp, path)
    return record


def boot(settings: ServiceSettings, address: str) -> None:
    """Start (or confirm) the data plane on the cluster at ``address``."""
    from deepedge.runtime.dataplane import DataPlaneAddress, start_data_plane

    start_data_plane(
        address,
        DataPlaneAddress(settings.serving_host, settings.serving_port),
        TableSource(settings.url, str(settings.data_dir)),
        sample_store_path(settings.data_dir),
    )


def run(settings: ServiceSettings, stop: threading.Event, parent_pid: int | None = None) -> None:
    """The host's life (module docstring) until ``stop`` is set or the parent is gone."""
    from deepedge.runtime.session import shutdown_ray

    head: HeadRecord | None = None
    address = settings.ray_address
    if address is None:
        head = read_head(settings)
        if head is None or not head.alive():
            head = start_head(settings)
        else:
            log.info("re-attaching to the data plane's Ray head at %s", head.address)
        if head.env.get("RAY_AUTH_MODE") == "token":
            from deepedge.runtime.local_cluster import ensure_token_auth

            ensure_token_auth({})  # as the head was started: with Ray's token
        address = head.address
    boot(settings, address)
    shutdown_ray()  # the detached actors and Serve run on without this driver
    log.warning("data plane serving at http://%s:%d/v2", settings.serving_host,
                settings.serving_port)  # fmt: skip
    while not stop.wait(WATCH_S):
        if parent_pid is not None and os.getppid() != parent_pid:
            break
        if head is not None and not head.alive():
            log.warning("the data plane's Ray head died; starting it again")
            head = start_head(settings)
            boot(settings, head.address)
            shutdown_ray()
    if head is not None:
        stop_head(head)
        _head_file(settings).unlink(missing_ok=True)
