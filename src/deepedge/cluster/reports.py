"""What node agents report, and the registry's book of nodes.

Every device of a live cluster runs a node agent (:mod:`deepedge.runtime.cluster.node_agent`) that
sends a :class:`NodeReport` on a heartbeat: its measured state ``X = (cpu, gpu, mem)``
(the P95 of its samples over the last period, :mod:`deepedge.cluster.metrics`), its device
type and memory, and its latency-critical applications with their deadlines ``delta_a``.

:class:`NodeBook` is the registry's state. Time is injected (``now_s``, one clock: the
registry's), so the rules are plain functions of it::

    status(n) = LEFT      if n said goodbye after its last report
                LOST      if now_s - last_seen_s(n) > lost_after_s
                DRAINING  if its agent announced a graceful leave (SIGTERM) and still reports
                ALIVE     otherwise

A lost node comes back ALIVE with its next report (a device that rebooted). A draining
node stays DRAINING while its agent reports (work moves off it, nothing new is placed on
it) until it leaves; a report from a new agent of that id (its ``seq`` starts again, or
another Ray node) ends the drain.

The planners read the alive nodes' reports as a ClusterSpec built upstairs
(:func:`deepedge.planning.sharding.live_spec.cluster_spec`): node documents stay at the
bottom of the house, where every layer may read them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.state import NodeState
from deepedge.core.errors import IllegalTransitionError, InvalidInputError, NotFoundError


@dataclass(frozen=True)
class AppReport:
    """A latency-critical application running on the node, with its deadline delta_a."""

    name: str
    kind: AppKind
    deadline_s: float


@dataclass(frozen=True)
class NodeReport:
    """One heartbeat of a node agent."""

    node_id: str  # the deepedge id: the node's ``deepedge-node:<id>`` resource
    device: DeviceType
    state: NodeState  # measured X over the last heartbeat period (P95)
    mem_total_mb: float
    mem_capacity_mb: float  # the most memory the node may have in use while it trains
    apps: tuple[AppReport, ...] = ()
    ray_node_id: str = ""  # the Ray node the agent runs on
    hostname: str = ""
    seq: int = 0  # heartbeat number since the agent started


class NodeStatus(enum.Enum):
    """A node's standing in the registry; clients compare the values, and only ``"alive"``
    takes new work. The transitions (:data:`TRANSITIONS`)::

        ALIVE    -> DRAINING, LOST, LEFT   SIGTERM to its agent; silence; goodbye
        DRAINING -> LEFT, LOST, ALIVE      goodbye once its work moved; silence; a new agent
        LOST     -> ALIVE, DRAINING, LEFT  reports resume (a drain survives); goodbye
        LEFT     -> ALIVE                  a new agent of that id
    """

    ALIVE = "alive"
    DRAINING = "draining"
    LOST = "lost"
    LEFT = "left"


TRANSITIONS: Mapping[NodeStatus, frozenset[NodeStatus]] = {
    NodeStatus.ALIVE: frozenset({NodeStatus.DRAINING, NodeStatus.LOST, NodeStatus.LEFT}),
    NodeStatus.DRAINING: frozenset({NodeStatus.LOST, NodeStatus.LEFT, NodeStatus.ALIVE}),
    NodeStatus.LOST: frozenset({NodeStatus.ALIVE, NodeStatus.DRAINING, NodeStatus.LEFT}),
    NodeStatus.LEFT: frozenset({NodeStatus.ALIVE}),
}


def check_transition(current: NodeStatus, new: NodeStatus) -> None:
    if new is not current and new not in TRANSITIONS[current]:
        raise IllegalTransitionError(
            f"illegal node transition {current.value} -> {new.value}",
            current=current.value,
            new=new.value,
        )


@dataclass(frozen=True)
class NodeView:
    """A node as the registry sees it at one instant."""

    report: NodeReport
    status: NodeStatus
    age_s: float  # seconds since its last report
    lost_since_s: float | None  # registry time at which it counts as lost (None: not lost)
    lost_for_s: float | None = None  # seconds it has counted as lost (None: not lost)


@dataclass
class _Entry:
    report: NodeReport
    last_seen_s: float
    left: bool = False
    draining: bool = False
    status: NodeStatus = NodeStatus.ALIVE


@dataclass
class NodeBook:
    """The registry's nodes (module docstring); ``lost_after_s`` > 0."""

    lost_after_s: float = 3.0
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.lost_after_s > 0:
            raise InvalidInputError("lost_after_s must be > 0", field="lost_after_s")

    def record(self, report: NodeReport, now_s: float) -> None:
        entry = self._entries.get(report.node_id)
        if entry is None:
            self._entries[report.node_id] = _Entry(report, now_s)
            return
        self._refresh(entry, now_s)
        new_agent = (
            entry.left
            or report.seq < entry.report.seq
            or report.ray_node_id != entry.report.ray_node_id
        )
        draining = entry.draining and not new_agent
        status = NodeStatus.DRAINING if draining else NodeStatus.ALIVE
        check_transition(entry.status, status)
        entry.report, entry.last_seen_s, entry.left = report, now_s, False
        entry.draining, entry.status = draining, status

    def drain(self, node_id: str, now_s: float) -> None:
        """``node_id``'s agent leaves gracefully: DRAINING until it leaves (idempotent)."""
        entry = self._entries.get(node_id)
        if entry is None:
            raise NotFoundError(f"no node {node_id!r} in the registry")
        self._refresh(entry, now_s)
        if entry.status is NodeStatus.LEFT:
            raise IllegalTransitionError(
                f"node {node_id!r} has left: nothing to drain",
                current=entry.status.value,
                new=NodeStatus.DRAINING.value,
            )
        entry.draining = True
        self._refresh(entry, now_s)

    def leave(self, node_id: str, now_s: float) -> None:
        entry = self._entries.get(node_id)
        if entry is None:
            raise NotFoundError(f"no node {node_id!r} in the registry")
        self._refresh(entry, now_s)
        check_transition(entry.status, NodeStatus.LEFT)
        entry.left, entry.status = True, NodeStatus.LEFT

    def _refresh(self, entry: _Entry, now_s: float) -> None:
        if entry.left:
            new = NodeStatus.LEFT
        elif now_s - entry.last_seen_s > self.lost_after_s:
            new = NodeStatus.LOST
        elif entry.draining:
            new = NodeStatus.DRAINING
        else:
            new = NodeStatus.ALIVE
        check_transition(entry.status, new)
        entry.status = new

    def views(self, now_s: float) -> list[NodeView]:
        """Every node ever seen, by id."""
        out = []
        for node_id in sorted(self._entries):
            entry = self._entries[node_id]
            self._refresh(entry, now_s)
            lost = entry.last_seen_s + self.lost_after_s
            is_lost = entry.status is NodeStatus.LOST
            out.append(
                NodeView(
                    entry.report,
                    entry.status,
                    now_s - entry.last_seen_s,
                    lost if is_lost else None,
                    now_s - lost if is_lost else None,
                )
            )
        return out

    def alive(self, now_s: float) -> list[NodeReport]:
        return [v.report for v in self.views(now_s) if v.status is NodeStatus.ALIVE]

    def not_alive(self, node_ids: Iterable[str], now_s: float) -> set[str]:
        """Those of ``node_ids`` that are DRAINING, LOST, LEFT or unknown."""
        alive = {r.node_id for r in self.alive(now_s)}
        return {n for n in node_ids if n not in alive}
