"""The data plane controller's placement bookkeeping, without a cluster: which nodes a
deployment's replicas go to as nodes come and go, and the decisions it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepedge.dataplane.protocol import classifier_signature
from deepedge.dataplane.replica_groups import GroupPlan, ReplicaGroup
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.serving_decisions import read_decisions
from deepedge.dataplane.serving_table import ModelRoute, ReplicaShape, ServingTable
from deepedge.planning.placement.model import PlacementProblem
from deepedge.runtime.serving.dataplane import DataPlaneController, ServedModelState

PROBLEM = PlacementProblem.model_validate({
    "sources": [{"id": c, "demands": [{"model": "cam", "rate_rps": 100.0,
                                       "max_latency_ms": 500.0}]} for c in ("c1", "c2")],
    "edge_nodes": [{"id": n, "memory_mb": 1500.0} for n in ("n1", "n2", "n3")],
    "models": [{"id": "cam", "variants": [{"id": "b8", "batch_size": 8, "latency_ms": 20.0,
                                           "memory_mb": 1400.0, "max_load_rps": 120.0}]}],
})  # fmt: skip
PLAN = GroupPlan("cam", "heuristic", (ReplicaGroup("b8", "n1", 1, 8),
                                      ReplicaGroup("b8", "n2", 1, 8)),
                 (("c1", "b8@n1"), ("c2", "b8@n2")), PROBLEM.model_dump_json())  # fmt: skip


def route(nodes: tuple[str, ...] = (), groups: GroupPlan | None = None) -> ModelRoute:
    return ModelRoute("t.cam", "d", "t", classifier_signature((1, 4, 4), 2), ("a", "b"),
                      Versions(1), {1: "v1.ts"}, {1: "x"}, ReplicaShape(nodes=nodes),
                      groups=groups)  # fmt: skip


def controller() -> DataPlaneController:
    return DataPlaneController(lambda: ServingTable({}, {}, ""))


@pytest.mark.parametrize(("alive_then", "alive_now", "pin_then", "pin_now", "decided"), [
    ({"n1", "n2"}, {"n1", "n2"}, "n1", "n1", None),
    ({"n1", "n2"}, {"n2"}, "n1", "n2", "node n1 not alive: replicas moved to n2"),
    ({"n1"}, set(), "n1", None, "node n1 not alive: no node of the target is alive"),
    (set(), set(), None, None, None),  # the emulated site: no named node is a live node
    (set(), {"n2"}, None, "n2", None),  # a node joining is not a move off a lost one
])  # fmt: skip
def test_a_deployment_without_placement_is_pinned_to_its_first_alive_node(
    alive_then: set[str], alive_now: set[str], pin_then: str | None, pin_now: str | None,
    decided: str | None,
) -> None:  # fmt: skip
    c = controller()
    r = route(nodes=("n1", "n2"))
    assert c._pinned("t.cam", r, frozenset(alive_then)) == pin_then
    assert c._pinned("t.cam", r, frozenset(alive_now)) == pin_now
    if decided is None:
        assert c._decisions == []
    else:
        assert len(c._decisions) == 1 and c._decisions[0].cause.startswith(decided)


def test_groups_leave_a_lost_node_once_and_stay_moved() -> None:
    c = controller()
    r = route(groups=PLAN)
    assert c._placed("t.cam", r, frozenset({"n1", "n2", "n3"})) == PLAN
    assert c._decisions == []
    moved = c._placed("t.cam", r, frozenset({"n2", "n3"}))
    assert moved is not None and moved.nodes == {"n2", "n3"}  # one instance a node
    assert set(moved.camera_table()) == {"c1", "c2"}
    assert [d.lost for d in c._decisions] == [("n1",)]
    assert "n1 not alive" in c._decisions[0].cause
    again = c._placed("t.cam", r, frozenset({"n1", "n2", "n3"}))  # n1 back: no move back
    assert again == moved and len(c._decisions) == 1


def test_nowhere_to_go_keeps_the_groups_and_says_so_once() -> None:
    c = controller()
    r = route(groups=PLAN)
    for _ in range(3):
        assert c._placed("t.cam", r, frozenset()) == PLAN
    assert len(c._decisions) == 1 and "no node" in c._decisions[0].cause


def test_each_deployment_says_its_standing_decision_once_whatever_the_others_say() -> None:
    from dataclasses import replace

    c = controller()
    cam, other = route(groups=PLAN), replace(route(groups=PLAN), model="t.other")
    for _ in range(3):  # two deployments with nowhere to go, polled in turn
        c._placed("t.cam", cam, frozenset())
        c._placed("t.other", other, frozenset())
    assert [d.model for d in c._decisions] == ["t.cam", "t.other"]
    assert [d.seq for d in c._decisions] == [1, 2]


def test_a_restarted_controller_keeps_its_journal_and_records_no_standing_move_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.jsonl"
    first = DataPlaneController(lambda: ServingTable({}, {}, ""), decisions_path=str(path))
    r = route(groups=PLAN)
    moved = first._placed("t.cam", r, frozenset({"n2", "n3"}))
    assert moved is not None
    assert [(d.seq, d.deployment_id, d.lost) for d in read_decisions(path)] == [(1, "d", ("n1",))]
    # restarted (Ray restarts the actor from its arguments): it re-places from the decision
    restarted = DataPlaneController(lambda: ServingTable({}, {}, ""), decisions_path=str(path))
    assert restarted._decisions == first._decisions
    assert restarted._placed("t.cam", r, frozenset({"n2", "n3"})) == moved
    assert len(read_decisions(path)) == 1  # the same move: not a new decision
    restarted._placed("t.cam", r, frozenset({"n2"}))  # n3 lost as well: a new one, numbered on
    assert [(d.seq, d.lost) for d in read_decisions(path)] == [(1, ("n1",)), (2, ("n3",))]


MOVED = GroupPlan("cam", "heuristic", (ReplicaGroup("b8", "n2", 1, 8),
                                       ReplicaGroup("b8", "n3", 1, 8)),
                  (("c1", "b8@n3"), ("c2", "b8@n2")), PROBLEM.model_dump_json())  # fmt: skip


def test_a_move_starts_the_new_groups_switches_the_router_when_they_run_then_retires() -> None:
    from deepedge.dataplane.group_moves import RETIRE_AFTER_S, plan_revision
    from deepedge.runtime.serving.camera_router import group_app

    c = controller()
    r = route(groups=PLAN)
    app = {node: group_app("t.cam", ReplicaGroup("b8", node, 1)) for node in ("n1", "n2", "n3")}
    running: set[str] = set()

    def step(target: GroupPlan, now_s: float) -> tuple[list[str], list[str]]:
        runs, left = c._move_groups("t.cam", r, target, lambda: set(running), now_s)
        return [t.name for t in runs], left

    assert step(PLAN, 0.0) == ([app["n1"], app["n2"]], [])  # the first plan: routed at once
    assert c._models["t.cam"].move.routed == PLAN
    running |= {app["n1"], app["n2"]}
    assert step(MOVED, 10.0) == ([app["n3"]], [])  # n1 lost: only the new group deployed
    assert step(MOVED, 11.0) == ([], []) and c._models["t.cam"].move.routed == PLAN  # n3 loading
    running |= {app["n3"]}
    assert step(MOVED, 12.0) == ([], [])  # n3 runs: the router is switched, n1 kept
    assert c._models["t.cam"].move.routed == MOVED
    c._models["t.cam"].reported = plan_revision(MOVED)  # the router's long poll reports it
    assert step(MOVED, 12.0 + RETIRE_AFTER_S - 0.5) == ([], [])
    assert step(MOVED, 12.0 + RETIRE_AFTER_S) == ([], [app["n1"]])  # only now n1 goes
    assert set(c._models["t.cam"].groups) == {app["n2"], app["n3"]}


def test_the_router_long_polls_the_plan_it_follows_and_reports_it() -> None:
    import asyncio

    from deepedge.dataplane.group_moves import plan_revision, switch

    c = controller()
    c._models["t.cam"] = ServedModelState(move=switch(PLAN, 0.0))
    c._reconcile = lambda table: None  # type: ignore[method-assign]  # (no Serve here)

    async def scenario() -> None:
        assert await c.plan_for("t.cam", "", 0.0) == (PLAN, plan_revision(PLAN))
        assert await c.plan_for("t.other", "", 0.0) == (None, "")
        waiting = asyncio.ensure_future(c.plan_for("t.cam", plan_revision(PLAN), 10.0))
        await asyncio.sleep(0.3)
        assert not waiting.done() and c._models["t.cam"].reported == plan_revision(PLAN)

        def moved(table: object) -> None:
            c._models["t.cam"].move = switch(MOVED, 1.0)

        c._reconcile = moved  # type: ignore[method-assign]
        assert await asyncio.wait_for(waiting, 2.0) == (MOVED, plan_revision(MOVED))
        assert c._poller is not None
        c._poller.cancel()

    asyncio.run(scenario())


@pytest.mark.parametrize(("changed", "restarts", "redeploys"), [
    (ReplicaGroup("b8", "n1", 1, 8), False, False),
    (ReplicaGroup("b8", "n1", 2, 8), False, True),  # scaled live by Serve
    (ReplicaGroup("b8", "n2", 1, 8), True, True),
    (ReplicaGroup("b1", "n1", 1, 1), True, True),
])  # fmt: skip
def test_a_group_restarts_only_when_its_replicas_resources_node_or_variant_change(
    changed: ReplicaGroup, restarts: bool, redeploys: bool
) -> None:
    from deepedge.runtime.serving.serve_apps import (
        group_application,
        group_fingerprint,
        group_version,
    )

    r, group = route(groups=PLAN), PLAN.groups[0]
    assert (group_version(r, changed) != group_version(r, group)) is restarts
    assert (group_fingerprint(r, changed) != group_fingerprint(r, group)) is redeploys
    deployment = group_application("t.cam", r, changed)._bound_deployment
    assert deployment.version == group_version(r, changed)
    assert deployment.num_replicas == changed.replicas


def test_live_keys_are_read_from_the_store_after_the_ask_and_the_reads_are_shared() -> None:
    """A copy about to refuse a key gets the store's keys as of its ask, not the table of
    the last poll (a key made since then is in it), and a burst of asks, with the poll's own
    reads, costs the store one read per gap."""
    import asyncio
    import time

    from deepedge.dataplane.keys import KeyGrant

    store: dict[str, dict[str, KeyGrant]] = {"keys": {}}
    reads: list[float] = []

    def source() -> ServingTable:
        reads.append(time.monotonic())
        return ServingTable.build({}, dict(store["keys"]))

    c = DataPlaneController(source, poll_s=3600.0)  # (its poll reads once, then sleeps)
    c._reconcile = lambda table: None  # type: ignore[method-assign]  # (no Serve here)

    async def scenario() -> None:
        assert await c.live_keys() == {}
        store["keys"] = {"digest": KeyGrant("d", "t")}  # made just now, before any poll
        asked = len(reads)
        burst = await asyncio.gather(*(c.live_keys() for _ in range(50)))
        assert burst == [{"digest": KeyGrant("d", "t")}] * 50
        assert len(reads) - asked == 1
        assert c._table.keys == {"digest": KeyGrant("d", "t")}  # the long polls have it too
        assert c._poller is not None
        c._poller.cancel()

    asyncio.run(scenario())
    # (the gap between reads is held on an injected clock, tests/dataplane/test_fresh_reads:
    # here the store's own clock would also count how late the event loop ran each read)
    assert len(reads) <= 3  # the poll's first read, the first ask's, the burst's one
