"""The data plane's host: the process of the service that keeps the data plane running.

``deepedge serve`` (with the data plane on) runs this as one of its supervised processes,
beside the API and the manager. It

1. gets a Ray cluster: the one named by the service's Ray address, or an embedded head of
   its own on this machine (:class:`~deepedge.runtime.local_cluster.LocalRayCluster` with no
   workers, recorded by :mod:`deepedge.service.embedded_ray`, so a restarted host re-attaches
   to a head that is still up instead of starting another; the service's learners keep a
   Ray of their own inside their sandboxes: Ray runs any code it is given, so tenant code
   never reaches the site's);
2. starts the data plane there (:func:`deepedge.runtime.dataplane.start_data_plane`: Ray
   Serve's HTTP proxy on the configured address, the controller reading the serving table
   from this service's store and keeping its moves in the journal of serving decisions on
   this machine's disk, the sample writer on this machine's disk);
3. watches: a head that dies is started again (and the data plane with it, from the store).

The API and the manager never talk to Ray for serving: if either crashes, Serve goes on
answering. When the service stops (or its supervisor is gone) the embedded head stops too.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path

from deepedge.controlplane.serving import TableSource, serving_capacity
from deepedge.dataplane.sample_store import sample_store_path
from deepedge.dataplane.serving_decisions import decisions_path
from deepedge.service.config import ServiceSettings
from deepedge.service.embedded_ray import (
    HeadRecord,
    forget_head,
    read_head,
    stop_head,
    write_head,
)

log = logging.getLogger(__name__)

WATCH_S = 2.0


def start_head(settings: ServiceSettings) -> HeadRecord:
    """A fresh embedded head (any recorded one is stopped first), recorded on disk."""
    from deepedge.runtime.local_cluster import HEAD_ID, LocalRayCluster

    old = read_head(settings.data_dir)
    if old is not None:
        stop_head(old)
    # Ray starts its workers at niceness 15 by default (to keep its own daemons responsive):
    # here they are the replicas answering the site's cameras, the latency-critical work,
    # and must not rank below a learner (a job may run niced: its manifest's ``nice``).
    extra: dict[str, str] = {"RAY_worker_niceness": "0"}
    state = None
    if settings.serving_high_throughput:
        from deepedge.runtime.serve_apps import high_throughput_env

        state = tempfile.mkdtemp(prefix="deserve-")  # short: it holds a Unix socket
        extra.update(high_throughput_env(Path(state)))
    cluster = LocalRayCluster(
        worker_ids=(),
        cpus_per_node=settings.serving_cpus or os.cpu_count() or 1,
        object_store_mb=settings.serving_object_store_mb,
        die_with_parent=True,  # the head never outlives this host, however it ends
        extra_env=extra,
    ).start()
    process = cluster.nodes[HEAD_ID].process
    assert process is not None
    record = HeadRecord(cluster.address, str(cluster.root), process.pid,
                        {"RAY_AUTH_MODE": cluster.env.get("RAY_AUTH_MODE", "")},
                        state)  # fmt: skip
    write_head(settings.data_dir, record)
    return record


def boot(settings: ServiceSettings, address: str) -> None:
    """Start (or confirm) the data plane on the cluster at ``address``."""
    from deepedge.runtime.dataplane import DataPlaneAddress, start_data_plane

    start_data_plane(
        address,
        DataPlaneAddress(settings.serving_host, settings.serving_port),
        TableSource(settings.url, str(settings.data_dir), *serving_capacity(settings)),
        sample_store_path(settings.data_dir),
        decisions_path=decisions_path(settings.data_dir),
    )


def run(settings: ServiceSettings, stop: threading.Event, parent_pid: int | None = None) -> None:
    """The host's life (module docstring) until ``stop`` is set or the parent is gone."""
    from deepedge.runtime.session import shutdown_ray

    head: HeadRecord | None = None
    try:
        address = settings.ray_address
        if address is None:
            head = read_head(settings.data_dir)
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
    finally:  # (also when Ray's own SIGTERM handler turns the stop into SystemExit)
        if head is not None:
            stop_head(head)
            forget_head(settings.data_dir)
