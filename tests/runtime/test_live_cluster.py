"""The registry actor and the live-cluster view on an embedded Ray (no agents running)."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import pytest

from deepedge.cluster.devices import DeviceType
from deepedge.cluster.reports import NodeReport, NodeStatus
from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError, NotFoundError
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.runtime.training.testbed import paper_testbed
from deepedge.runtime.training.update import UpdateConfig, run_model_update

pytestmark = pytest.mark.ray


def _report(node_id: str) -> NodeReport:
    return NodeReport(
        node_id=node_id,
        device=DeviceType.RASPBERRY_PI_4,
        state=NodeState(cpu_util=0.1, mem_util=0.2),
        mem_total_mb=4096.0,
        mem_capacity_mb=3600.0,
    )


def test_no_agent_means_no_spec_and_silence_means_lost(ray_cluster: None) -> None:
    import ray

    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.node_agent import NAMESPACE, REGISTRY_NAME, registry

    reg = registry(lost_after_s=0.5)
    try:
        live = LiveCluster(reg)
        with pytest.raises(NotFoundError, match="deepedge agent"):
            live.spec(100)
        ray.get([reg.heartbeat.remote(_report(n)) for n in ("head", "n1")])
        spec = LiveCluster(reg, ps_node="head").spec(100)
        assert [w.id for w in spec.workers] == ["n1"] and spec.parameter_server.node == "head"
        for _ in range(300):  # no more heartbeats: both become LOST after 0.5 s
            if live.lost(["head", "n1"]) == {"head", "n1"}:
                break
            time.sleep(0.05)
        assert {v.status for v in live.views()} == {NodeStatus.LOST}
        ray.get(reg.heartbeat.remote(_report("n1")))  # a lost node comes back
        assert live.lost(["head", "n1"]) == {"head"}
    finally:
        ray.kill(ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE))


@pytest.mark.parametrize(
    ("ps_node", "standing"),
    [("nano-9", "no agent reports as it"), ("n2", "it is draining"), ("n3", "it is left")],
)
def test_a_ps_node_that_is_not_alive_is_refused_naming_the_alive_nodes(
    ray_cluster: None, ps_node: str, standing: str
) -> None:
    import ray

    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.node_agent import NAMESPACE, REGISTRY_NAME, registry

    reg = registry(lost_after_s=30.0)
    try:
        ray.get([reg.heartbeat.remote(_report(n)) for n in ("head", "n1", "n2", "n3")])
        ray.get([reg.drain.remote("n2"), reg.leave.remote("n3")])
        with pytest.raises(InvalidInputError) as raised:
            LiveCluster(reg, ps_node=ps_node)
        assert raised.value.field == "ps_node"
        assert f"node {ps_node!r}" in raised.value.message and standing in raised.value.message
        assert raised.value.message.endswith("alive: head, n1")
        live = LiveCluster(reg, ps_node="n1")
        assert live.spec(100).parameter_server.node == "n1"
        assert live.draining(["n1", "n2", "n3"]) == {"n2", "n3"}
        assert live.lost(["n1", "n2"]) == {"n2"}  # not alive; the watch tells a drain apart
    finally:
        ray.kill(ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE))


def test_a_live_update_refuses_pacing(ray_cluster: None, tmp_path: Path) -> None:
    from deepedge.runtime.cluster.live_cluster import LiveCluster

    factory = functools.partial(make_edge_model, 10, 8, 2, 0)
    x = np.zeros((8, 1, 8, 8), np.float32)
    y = np.zeros(8, np.int64)
    with pytest.raises(InvalidInputError, match="time_scale"):
        run_model_update(
            paper_testbed(8),
            (x, y),
            (x, y),
            factory,
            get_flat_weights(factory()),
            tmp_path,
            planner=lambda c: None,  # type: ignore[arg-type,return-value]
            config=UpdateConfig(time_scale=0.01),
            live=LiveCluster.__new__(LiveCluster),  # never consulted: refused first
        )


class _Gone:
    """A live cluster whose ``lost`` and ``draining`` answer from fixed sets (the watch's
    only calls); a draining node is also not alive, so ``lost`` includes it."""

    def __init__(self, gone: set[str], draining: set[str]) -> None:
        self.gone, self.leaving = gone | draining, draining

    def lost(self, node_ids: set[str]) -> set[str]:
        return set(node_ids) & self.gone

    def draining(self, node_ids: set[str]) -> set[str]:
        return set(node_ids) & self.leaving


@pytest.mark.parametrize(
    ("gone", "draining", "lost", "drained"),
    [
        (set(), set(), set(), {}),
        ({"nano-1"}, set(), {"nano-1"}, {}),
        ({"ps-node"}, set(), {"parameter-server"}, {}),  # the PS's node: the PS, not a worker
        ({"ps-node", "nano-2"}, set(), {"parameter-server", "nano-2"}, {}),
        ({"nano-3"}, set(), set(), {}),  # not in the plan: not the launch's business
        (set(), {"nano-1"}, set(), {"nano-1": "nano-1"}),  # a drain is never a loss
        (set(), {"ps-node"}, set(), {"parameter-server": "ps-node"}),
        ({"nano-2"}, {"nano-1"}, {"nano-2"}, {"nano-1": "nano-1"}),
        (set(), {"nano-3"}, set(), {}),
    ],
)
def test_the_watch_names_the_launch_members_on_lost_and_draining_nodes(
    gone: set[str], draining: set[str], lost: set[str], drained: dict[str, str]
) -> None:
    from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
    from deepedge.runtime.training.update import _watch

    cluster = paper_testbed(100)
    cluster = cluster.model_copy(
        update={"parameter_server": cluster.parameter_server.model_copy(update={"node": "ps-node"})}
    )
    plan = ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=100,
        workers=[
            WorkerAssignment(id="nano-1", selected=True, shard=50, batch_size=8),
            WorkerAssignment(id="nano-2", selected=True, shard=50, batch_size=8),
            WorkerAssignment(id="nano-3", selected=False, shard=0, batch_size=0),
        ],
    )
    watch = _watch(_Gone(gone, draining), plan, cluster)  # type: ignore[arg-type]
    departures = watch()
    assert (departures.lost, departures.drained) == (lost, drained)


@pytest.mark.parametrize(
    ("lost", "drained", "blamed", "kind", "strikes"),
    [
        (set(), {"nano-1": "nano-1"}, "nano-1", "node-drained", {"nano-1": 1}),  # no new one
        (set(), {"parameter-server": "ps-node"}, "parameter-server", "node-drained", {"nano-1": 1}),
        ({"nano-2"}, {"nano-1": "nano-1"}, "nano-2", "node-lost", {"nano-1": 1, "nano-2": 1}),
    ],
)
def test_a_drain_moves_the_member_without_a_strike_and_says_why(
    lost: set[str], drained: dict[str, str], blamed: str, kind: str, strikes: dict[str, int]
) -> None:
    from deepedge.runtime.training.monitor import StatusLog, StrikeBook
    from deepedge.runtime.training.update_epochs import (
        Departures,
        FailureBook,
        WorkerFailure,
        _check_nodes,
    )

    book = FailureBook(StrikeBook(), StatusLog())
    book.strikes.record("nano-1")  # an earlier strike stays, and no drain adds one
    with pytest.raises(WorkerFailure) as raised:
        _check_nodes(lambda: Departures(lost, drained), 2, book)
    assert (raised.value.event.worker_id, raised.value.event.kind.value) == (blamed, kind)
    assert book.strikes.as_dict() == strikes
    if kind == "node-drained":
        note = book.status.events[-1]
        assert note.data["cause"] == "drain"
        assert note.message.startswith(f"node {drained[blamed]} drains: moved ")
        assert "without a strike" in note.message
