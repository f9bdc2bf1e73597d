"""The data plane's moves as deployment events: the event a decision becomes, the cursor
that records each decision once, and the loop's recorder on a real store across restarts of
the loop and of the controller (the journal reopened)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deepedge.api.deployment_schemas import EventView
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.controlplane.records import DeploymentId, EventKind
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.controlplane.serving_moves import (
    MoveRecorder,
    camera_moves,
    move_event,
    recorded_through,
    unrecorded,
)
from deepedge.dataplane.serving_decisions import DecisionJournal, ServingDecision
from deepedge.service.records import Tenant
from deepedge.service.store import JobStore


def plan(*groups: tuple[str, str, int], cameras: dict[str, str]) -> dict[str, Any]:
    return {"model": "cam", "method": "heuristic", "cause": "placement decision",
            "groups": [{"variant": v, "node": n, "replicas": r, "max_batch_size": 8}
                       for v, n, r in groups],
            "cameras": cameras, "problem": "cams"}  # fmt: skip


DECIDED = plan(("b8", "n1", 1), ("b8", "n2", 1), cameras={"c1": "b8@n1", "c2": "b8@n2"})
RESOLVED = plan(("b8", "n2", 1), ("b8", "n3", 1), cameras={"c1": "b8@n3", "c2": "b8@n2"})
MERGED = plan(("b8", "n2", 2), cameras={"c1": "b8@n2", "c2": "b8@n2"})
SMALLER = plan(("b1", "n3", 1), ("b8", "n2", 1), cameras={"c1": "b1@n3", "c2": "b8@n2"})
LOST = "node(s) n1 not alive"


def decision(
    seq: int, before: dict[str, Any], after: dict[str, Any], cause: str = LOST,
    deployment: str = "d1", lost: tuple[str, ...] = ("n1",),
) -> ServingDecision:  # fmt: skip
    return ServingDecision(seq, deployment, "t.cam", 1000.0 + seq, cause, lost, before, after)


@pytest.mark.parametrize(("before", "after", "cause", "message", "from_nodes", "to_nodes"), [
    (DECIDED, RESOLVED, f"{LOST}: re-solved (heuristic)",
     "b8 group of c1 moved from n1 to n3: node(s) n1 not alive: re-solved (heuristic)",
     ["n1", "n2"], ["n2", "n3"]),
    (DECIDED, MERGED, f"{LOST}: moved to the least-loaded node",
     "b8 group of c1 moved from n1 to n2: node(s) n1 not alive: moved to the least-loaded node",
     ["n1", "n2"], ["n2"]),
    (DECIDED, SMALLER, f"{LOST}: re-solved (heuristic)",
     "group of c1 moved from b8 on n1 to b1 on n3: node(s) n1 not alive: re-solved (heuristic)",
     ["n1", "n2"], ["n2", "n3"]),
    (DECIDED, DECIDED, "no node of cam's placement is alive (lost: n1, n2)",
     "replicas stay on n1, n2: no node of cam's placement is alive (lost: n1, n2)",
     ["n1", "n2"], ["n1", "n2"]),
    ({"node": "n1"}, {"node": "n2"}, "node n1 not alive: replicas moved to n2",
     "replicas moved from n1 to n2: node n1 not alive: replicas moved to n2", ["n1"], ["n2"]),
    ({"node": "n1"}, {"node": None},
     "node n1 not alive: no node of the target is alive: replicas placed anywhere",
     "replicas moved from n1 to any node: node n1 not alive: no node of the target is alive: "
     "replicas placed anywhere", ["n1"], []),
])  # fmt: skip
def test_a_decision_becomes_one_move_event_with_its_cause_nodes_and_time(
    before: dict[str, Any], after: dict[str, Any], cause: str, message: str,
    from_nodes: list[str], to_nodes: list[str],
) -> None:  # fmt: skip
    event = move_event(decision(7, before, after, cause))
    assert event.kind is EventKind.MOVE
    assert event.message == message
    detail = event.detail
    assert (detail["decision"], detail["decided_at"], detail["cause"]) == (7, 1007.0, cause)
    assert (detail["from_nodes"], detail["to_nodes"], detail["lost"]) == (
        from_nodes, to_nodes, ["n1"],
    )  # fmt: skip
    assert (detail["before"], detail["after"], detail["model"]) == (before, after, "t.cam")
    assert recorded_through(event) == 7


def test_camera_moves_name_each_camera_whose_group_changed_with_its_variant() -> None:
    assert camera_moves(DECIDED, SMALLER) == [
        {"cameras": ["c1"], "from": {"variant": "b8", "node": "n1"},
         "to": {"variant": "b1", "node": "n3"}},
    ]  # fmt: skip
    both = plan(("b8", "n3", 2), cameras={"c1": "b8@n3", "c2": "b8@n3"})
    assert [m["cameras"] for m in camera_moves(DECIDED, both)] == [["c1"], ["c2"]]
    assert camera_moves(DECIDED, DECIDED) == []
    assert camera_moves({"node": "n1"}, {"node": "n1"}) == []


@pytest.mark.parametrize(("seqs", "recorded", "expected"), [
    ([(1, "d1"), (2, "d2"), (3, "d1")], {}, {"d1": [1, 3], "d2": [2]}),
    ([(1, "d1"), (2, "d2"), (3, "d1")], {"d1": 1}, {"d1": [3], "d2": [2]}),
    ([(1, "d1"), (2, "d2"), (3, "d1")], {"d1": 3, "d2": 2}, {}),  # all recorded: nothing
    ([(3, "d1"), (1, "d1"), (2, "d1")], {"d1": 1}, {"d1": [2, 3]}),  # oldest first
    ([(5, "d1")], {"d1": 9}, {}),  # never an older one than the cursor
])  # fmt: skip
def test_the_cursor_leaves_what_each_deployment_recorded(
    seqs: list[tuple[int, str]], recorded: dict[str, int], expected: dict[str, list[int]],
) -> None:  # fmt: skip
    decisions = [decision(seq, DECIDED, RESOLVED, deployment=d) for seq, d in seqs]
    got = unrecorded(decisions, recorded)
    assert {d: [x.seq for x in new] for d, new in got.items()} == expected


def _deployment(registry: DeploymentStore, tenant: Tenant, name: str) -> DeploymentId:
    record, _ = registry.create(tenant.id, DeploymentSpec(name=name), now=0.0)
    return record.id


def _moves(registry: DeploymentStore, deployment_id: DeploymentId) -> list[int]:
    return [e.detail["decision"] for e in registry.events(deployment_id)
            if e.kind is EventKind.MOVE]  # fmt: skip


def test_each_decision_is_recorded_once_across_restarts_of_the_loop_and_the_controller(
    sqlite_store: JobStore, tmp_path: Path,
) -> None:  # fmt: skip
    registry = DeploymentStore(sqlite_store)
    tenant = sqlite_store.create_tenant("t", "tok-t")
    d1, d2 = _deployment(registry, tenant, "cam"), _deployment(registry, tenant, "gone")
    path = tmp_path / "decisions.jsonl"
    recorder = MoveRecorder(registry, path)
    assert recorder.record() == 0  # no journal yet (no data plane)
    controller = DecisionJournal(path)
    controller.append(d1, "t.cam", 1.0, f"{LOST}: re-solved", ("n1",), DECIDED, RESOLVED)
    controller.append(d2, "t.gone", 2.0, LOST, ("n1",), {"node": "n1"}, {"node": "n2"})
    gone = registry.get_by_id(d2)
    registry.commit(gone, Step(deployment={"status": DeploymentStatus.STOPPED}))
    registry.delete(registry.get_by_id(d2))
    assert recorder.record() == 1  # the deleted deployment's decision goes with it
    assert recorder.record() == 0
    assert MoveRecorder(registry, path).record() == 0  # the loop restarted: no duplicate
    restarted = DecisionJournal(path)  # the controller restarted, decides while the loop is down
    restarted.append(d1, "t.cam", 3.0, "node(s) n3 not alive", ("n3",), RESOLVED, MERGED)
    restarted.append(d1, "t.cam", 4.0, "node(s) n2 not alive", ("n2",), MERGED, SMALLER)
    assert MoveRecorder(registry, path).record() == 2
    assert _moves(registry, d1) == [1, 3, 4]
    events = [e for e in registry.events(d1) if e.kind is EventKind.MOVE]
    assert events[0].message.startswith("b8 group of c1 moved from n1 to n3: node(s) n1")
    assert [e.detail["decided_at"] for e in events] == [1.0, 3.0, 4.0]
    view = EventView.of(events[0]).model_dump(mode="json")  # what the API's events answer
    assert (view["kind"], view["detail"]["cause"]) == ("move", f"{LOST}: re-solved")


def test_a_deployment_changed_under_the_loop_is_recorded_on_a_later_tick(
    sqlite_store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from deepedge.core.errors import ConflictError

    registry = DeploymentStore(sqlite_store)
    tenant = sqlite_store.create_tenant("t", "tok-t")
    d1 = _deployment(registry, tenant, "cam")
    path = tmp_path / "decisions.jsonl"
    DecisionJournal(path).append(d1, "t.cam", 1.0, LOST, ("n1",), DECIDED, RESOLVED)
    recorder = MoveRecorder(registry, path)
    commit = registry.commit

    def conflict(*args: Any, **kwargs: Any) -> None:
        raise ConflictError("changed meanwhile")

    monkeypatch.setattr(registry, "commit", conflict)
    assert recorder.record() == 0
    monkeypatch.setattr(registry, "commit", commit)
    assert recorder.record() == 1  # the journal did not change: read again all the same
    assert _moves(registry, d1) == [1]
