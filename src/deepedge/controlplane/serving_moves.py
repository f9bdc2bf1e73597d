"""The data plane's moves as the deployments' ``move`` events.

The data plane's controller moves a deployment's replicas off a lost or draining node
within its poll and keeps each move in the site's journal of serving decisions
(:mod:`deepedge.dataplane.serving_decisions`); it does not write the store. The control
loop is the one writer of the deployments' events: each tick, :class:`MoveRecorder` reads
the journal and records every decision not recorded yet as one ``move`` event of its
deployment (:func:`move_event`: the cause, the nodes lost, each camera's group before and
after, the plans, the decision's time).

Exactly once, across restarts of either side: a decision carries the journal's number
(``seq``, rising for ever); its event carries it in ``detail["decision"]``, and a
deployment's newest ``move`` event is its cursor (:func:`unrecorded`). The event and the
cursor are one row, committed in one transaction, so a loop that stops between two
decisions records the second on its next tick, and never the first twice. A decision made
while the loop was down is recorded when it comes back, as long as the journal keeps it
(its newest thousand). A deployment deleted meanwhile takes its decisions with it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.controlplane.records import DeploymentId, Event, EventKind
from deepedge.core.errors import ConflictError, NotFoundError
from deepedge.dataplane.replica_groups import ReplicaGroup
from deepedge.dataplane.serving_decisions import ServingDecision, read_decisions

log = logging.getLogger(__name__)

DECISION = "decision"  # the detail field of a move event: its decision's journal number


def camera_moves(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Which cameras' group changed, grouped by (group before, group after), in camera
    order: ``{"cameras", "from": {"variant", "node"}, "to": {...}}``. A pinned deployment
    (``{"node": ...}`` documents, no cameras) moved as one ``{"cameras": []}`` entry."""
    if "groups" not in before:
        if before.get("node") == after.get("node"):
            return []
        return [{"cameras": [], "from": {"variant": None, "node": before.get("node")},
                 "to": {"variant": None, "node": after.get("node")}}]  # fmt: skip
    was, now = _groups(before), _groups(after)
    old, new = dict(before.get("cameras") or {}), dict(after.get("cameras") or {})
    moves: dict[tuple[str, str | None], list[str]] = {}
    for camera in sorted(old):
        if new.get(camera) != old[camera]:
            moves.setdefault((old[camera], new.get(camera)), []).append(camera)
    return [
        {"cameras": cameras, "from": was.get(a, {"variant": None, "node": None}),
         "to": now.get(b, {"variant": None, "node": None}) if b is not None
         else {"variant": None, "node": None}}
        for (a, b), cameras in moves.items()
    ]  # fmt: skip


def _groups(plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A plan document's groups by their name (the camera table's values)."""
    return {ReplicaGroup(g["variant"], g["node"], g["replicas"]).name:
            {"variant": g["variant"], "node": g["node"]}
            for g in plan.get("groups") or []}  # fmt: skip


def _nodes(plan: Mapping[str, Any]) -> list[str]:
    if "groups" in plan:
        return sorted({str(g["node"]) for g in plan.get("groups") or []})
    return [str(plan["node"])] if plan.get("node") is not None else []


def _said(move: Mapping[str, Any]) -> str:
    a, b = move["from"], move["to"]
    to = b["node"] or "any node"
    if not move["cameras"]:
        return f"replicas moved from {a['node']} to {to}"
    who = f"group of {', '.join(move['cameras'])}"
    if a["variant"] == b["variant"]:
        return f"{a['variant']} {who} moved from {a['node']} to {to}"
    return f"{who} moved from {a['variant']} on {a['node']} to {b['variant']} on {to}"


def move_event(decision: ServingDecision) -> Event:
    """The decision as its deployment's ``move`` event (module docstring), e.g. ``b8 group
    of c1 moved from n1 to n3: node(s) n1 not alive: re-solved (heuristic)``."""
    moves = camera_moves(decision.before, decision.after)
    before, after = _nodes(decision.before), _nodes(decision.after)
    if moves:
        said = "; ".join(_said(m) for m in moves)
    elif decision.before == decision.after:
        said = f"replicas stay on {', '.join(before) or 'no node'}"
    else:
        said = f"replicas moved from {', '.join(before)} to {', '.join(after) or 'any node'}"
    return Event(
        EventKind.MOVE,
        f"{said}: {decision.cause}",
        detail={DECISION: decision.seq, "decided_at": decision.at, "model": decision.model,
                "cause": decision.cause, "lost": list(decision.lost), "moves": moves,
                "from_nodes": before, "to_nodes": after, "before": decision.before,
                "after": decision.after},
    )  # fmt: skip


def recorded_through(event: Event | None) -> int:
    """The journal number of a deployment's newest ``move`` event (0: none yet)."""
    return int(event.detail.get(DECISION, 0)) if event is not None else 0


def unrecorded(
    decisions: Iterable[ServingDecision], recorded: Mapping[str, int]
) -> dict[str, list[ServingDecision]]:
    """The decisions to record, by deployment, oldest first: those numbered past their
    deployment's cursor (``recorded``; a deployment missing there has recorded none)."""
    out: dict[str, list[ServingDecision]] = {}
    for decision in sorted(decisions, key=lambda d: d.seq):
        if decision.seq > recorded.get(decision.deployment_id, 0):
            out.setdefault(decision.deployment_id, []).append(decision)
    return out


class MoveRecorder:
    """The control loop's side: the journal at ``path`` recorded as events (module
    docstring). A journal unchanged since a pass that recorded everything is not read."""

    def __init__(self, deployments: DeploymentStore, path: Path) -> None:
        self.deployments = deployments
        self.path = path
        self._done: tuple[int, int, int] | None = None  # the journal's stat at the last pass

    def record(self) -> int:
        """Record what is new; returns how many events were recorded. A deployment changed
        under the loop (:class:`ConflictError`) is tried again on the next call."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return 0  # no data plane, or it never moved anything
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen == self._done:
            return 0
        decisions = read_decisions(self.path)
        ids = {d.deployment_id for d in decisions}
        recorded = {
            i: recorded_through(self.deployments.last_event(DeploymentId(i), EventKind.MOVE))
            for i in ids
        }
        count, complete = 0, True
        for deployment_id, new in unrecorded(decisions, recorded).items():
            try:
                current = self.deployments.get_by_id(DeploymentId(deployment_id))
                self.deployments.commit(current, Step(events=tuple(map(move_event, new))))
            except NotFoundError:
                continue  # deleted: its events went with it
            except ConflictError as exc:
                log.info("move events of %s wait for the next tick (%s)", deployment_id, exc)
                complete = False
                continue
            count += len(new)
        if complete:
            self._done = seen
        return count
