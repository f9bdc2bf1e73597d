"""The live nodes of the service's Ray cluster, as one document: what the node watcher writes
and every other process reads.

The API and the manager hold no Ray connection. One process of the service that does (the
node watcher, :mod:`deepedge.runtime.cluster.node_snapshot`, run by ``deepedge serve
--ray-address``) writes a :class:`LiveNodes` snapshot of the node registry every second,
whole or absent (:data:`SNAPSHOT_FILE` under the data folder's ``run/``).
:func:`fresh_snapshot` reads it, or raises
:class:`~deepedge.core.errors.DependencyUnavailableError` (503) when there is none yet or
it is older than :data:`STALE_AFTER_S` (the watcher lost the cluster). What a deployment
makes of it is the control plane's (:mod:`deepedge.controlplane.live_nodes`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from deepedge.cluster.reports import NodeStatus
from deepedge.core.durable import write_atomically
from deepedge.core.errors import DependencyUnavailableError

SNAPSHOT_FILE = "live-nodes.json"  # under DATA/run/
PERIOD_S = 1.0  # how often the watcher writes it
STALE_AFTER_S = 10.0  # a snapshot older than this says nothing about the cluster now


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LiveApp(_Doc):
    name: str
    kind: str
    deadline_s: float


class NodeResources(_Doc):
    """A Ray node's total resources (Ray's figures; memory in MiB)."""

    cpus: float = 0.0
    gpus: float = 0.0
    memory_mb: float = 0.0  # Ray's ``memory`` resource: what tasks and actors may ask for
    object_store_mb: float = 0.0  # the shared memory every Ray process there maps


class LiveNode(_Doc):
    """One agent's node: the registry's view of it, with its Ray node's labels and
    resources."""

    node_id: str
    status: NodeStatus
    device: str
    age_s: float = Field(description="seconds since its last report")
    cpu_util: float
    gpu_util: float | None
    mem_util: float
    mem_total_mb: float
    apps: list[LiveApp] = Field(default_factory=list)
    ray_node_id: str = ""
    hostname: str = ""
    address: str = Field("", description="its Ray node's IP address (Ray's node table)")
    lost_at: float | None = Field(
        None, description="wall-clock seconds at which the registry counted it lost (lost only)"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    resources: NodeResources = Field(default_factory=NodeResources)


class LiveNodes(_Doc):
    """The registry at one instant (``taken_at``: wall-clock seconds)."""

    taken_at: float
    ray_address: str
    nodes: list[LiveNode] = Field(default_factory=list)

    def alive(self) -> list[LiveNode]:
        return [n for n in self.nodes if n.status is NodeStatus.ALIVE]

    def node(self, node_id: str) -> LiveNode | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)


def snapshot_path(data_dir: Path) -> Path:
    return Path(data_dir) / "run" / SNAPSHOT_FILE


def write_snapshot(data_dir: Path, snapshot: LiveNodes) -> None:
    write_atomically(snapshot_path(data_dir), snapshot.model_dump_json().encode())


def read_snapshot(data_dir: Path) -> LiveNodes | None:
    try:
        return LiveNodes.model_validate_json(snapshot_path(data_dir).read_bytes())
    except (OSError, ValueError):
        return None


def fresh_snapshot(snapshot: LiveNodes | None, now: float, ray_address: str) -> LiveNodes:
    """``snapshot`` when it is recent (module docstring), else a 503 naming why."""
    if snapshot is None:
        raise DependencyUnavailableError(
            f"no view of the Ray cluster at {ray_address} yet: the service's node watcher "
            "has not written one (is the cluster up? try again in a few seconds)"
        )
    age_s = now - snapshot.taken_at
    if age_s > STALE_AFTER_S:
        raise DependencyUnavailableError(
            f"the view of the Ray cluster at {ray_address} is {age_s:.0f} s old: the "
            "service's node watcher cannot reach the cluster"
        )
    return snapshot
