"""The service's node watcher: the node registry written down for the API and the manager.

``deepedge serve --ray-address A`` runs :func:`watch` as one of its supervised processes
(the API and the manager hold no Ray connection). Every :data:`~deepedge.controlplane.
live_nodes.PERIOD_S` it reads the registry's views (:mod:`deepedge.runtime.cluster.node_agent`)
and Ray's own table of nodes (each agent's Ray node: its labels and total resources, the
object store among them) and writes them as one
:class:`~deepedge.controlplane.live_nodes.LiveNodes` document, whole or absent. A cluster
it cannot reach leaves the last document to age (the readers call it stale after
:data:`~deepedge.controlplane.live_nodes.STALE_AFTER_S`); it connects again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ray

from deepedge.cluster.live_nodes import (
    PERIOD_S,
    LiveApp,
    LiveNode,
    LiveNodes,
    NodeResources,
    write_snapshot,
)
from deepedge.cluster.reports import NodeView
from deepedge.core.errors import NotFoundError
from deepedge.runtime.cluster.node_agent import registered_nodes
from deepedge.runtime.cluster.session import ensure_ray, shutdown_ray

log = logging.getLogger(__name__)
MIB = 1024.0 * 1024.0


def ray_node_table() -> dict[str, Mapping[str, Any]]:
    """Ray's alive nodes by Ray node id (``Labels``, ``Resources``)."""
    return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}


def live_node(view: NodeView, ray_node: Mapping[str, Any] | None, now: float) -> LiveNode:
    """The registry's ``view`` of a node and its Ray node's row, at wall-clock ``now`` (the
    registry counts time on its own clock: a loss is dated ``lost_for_s`` before ``now``)."""
    report = view.report
    total: Mapping[str, float] = (ray_node or {}).get("Resources", {})
    labels = {str(k): str(v) for k, v in (ray_node or {}).get("Labels", {}).items()
              if not str(k).startswith("ray.io/")}  # fmt: skip
    return LiveNode(
        node_id=report.node_id,
        status=view.status,
        device=report.device.value,
        age_s=view.age_s,
        cpu_util=report.state.cpu_util,
        gpu_util=report.state.gpu_util,
        mem_util=report.state.mem_util,
        mem_total_mb=report.mem_total_mb,
        apps=[LiveApp(name=a.name, kind=a.kind, deadline_s=a.deadline_s) for a in report.apps],
        ray_node_id=report.ray_node_id,
        hostname=report.hostname,
        address=str((ray_node or {}).get("NodeManagerAddress", "")),
        lost_at=None if view.lost_for_s is None else now - view.lost_for_s,
        labels=labels,
        resources=NodeResources(
            cpus=float(total.get("CPU", 0.0)),
            gpus=float(total.get("GPU", 0.0)),
            memory_mb=float(total.get("memory", 0.0)) / MIB,
            object_store_mb=float(total.get("object_store_memory", 0.0)) / MIB,
        ),
    )


def take(address: str) -> LiveNodes:
    """The registry now (Ray connected); no agent yet: no nodes."""
    try:
        views = registered_nodes()
    except NotFoundError:
        views = []
    table = ray_node_table()
    now = time.time()
    nodes = [live_node(v, table.get(v.report.ray_node_id), now) for v in views]
    return LiveNodes(taken_at=now, ray_address=address, nodes=nodes)


def watch(address: str, data_dir: Path, stop: threading.Event, period_s: float = PERIOD_S) -> None:
    """Write the snapshot every ``period_s`` until ``stop`` (module docstring)."""
    connected = False
    try:
        while not stop.is_set():
            try:
                if not connected:
                    ensure_ray(address=address)
                    connected = True
                write_snapshot(data_dir, take(address))
            except Exception as exc:  # the cluster went away: reconnect, the snapshot ages
                log.warning("node watcher: the cluster at %s: %s", address, exc)
                shutdown_ray()
                connected = False
            stop.wait(period_s)
    finally:
        shutdown_ray()
