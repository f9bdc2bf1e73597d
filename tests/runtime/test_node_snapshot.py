"""The node watcher's document and where a live update ran, without a cluster: a registry
view joined with Ray's node table, and Ray's placements mapped back to the agents."""

from __future__ import annotations

import pytest

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.reports import AppReport, NodeReport, NodeStatus, NodeView
from deepedge.cluster.state import NodeState
from deepedge.runtime.cluster.live_cluster import misplaced, nodes_of_placements
from deepedge.runtime.cluster.node_snapshot import live_node
from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID

MIB = 1024 * 1024


def view(
    node_id: str,
    ray_node_id: str,
    status: NodeStatus = NodeStatus.ALIVE,
    lost_for_s: float | None = None,
) -> NodeView:
    report = NodeReport(
        node_id=node_id, device=DeviceType.JETSON_NANO,
        state=NodeState(cpu_util=0.25, gpu_util=None, mem_util=0.5),
        mem_total_mb=4096.0, mem_capacity_mb=2048.0,
        apps=(AppReport("cam", AppKind.SIFT, 0.2),), ray_node_id=ray_node_id, hostname="h",
    )  # fmt: skip
    return NodeView(report, status, 0.4, None, lost_for_s)


def test_a_live_node_joins_the_agents_report_with_its_ray_node() -> None:
    ray_node = {
        "NodeID": "r1",
        "NodeManagerAddress": "10.0.0.7",
        "Labels": {"zone": "line-1", "ray.io/node-id": "r1"},
        "Resources": {"CPU": 4.0, "memory": 3000.0 * MIB, "object_store_memory": 80.0 * MIB},
    }
    node = live_node(view("n1", "r1"), ray_node, 1000.0)
    assert node.node_id == "n1" and node.status is NodeStatus.ALIVE
    assert node.address == "10.0.0.7" and node.lost_at is None
    assert node.device == "jetson-nano" and node.cpu_util == 0.25
    assert node.labels == {"zone": "line-1"}  # Ray's own labels are not the user's
    assert node.resources.object_store_mb == pytest.approx(80.0)
    assert node.resources.memory_mb == pytest.approx(3000.0) and node.resources.gpus == 0.0
    assert [(a.name, a.kind, a.deadline_s) for a in node.apps] == [("cam", "sift", 0.2)]
    alone = live_node(view("n2", "gone"), None, 1000.0)  # its Ray node left the table
    assert alone.resources.cpus == 0.0 and alone.labels == {} and alone.address == ""
    # the registry's clock is its own: a loss is dated by how long ago it was
    lost = live_node(view("n3", "gone", NodeStatus.LOST, 12.5), None, 1000.0)
    assert lost.lost_at == pytest.approx(987.5)


def test_ray_placements_are_named_by_the_agents_on_those_ray_nodes() -> None:
    views = [view("n1", "r1"), view("n2", "r2"), view("n3", "r3")]
    launches = nodes_of_placements(
        [{"n1": "r1", "n2": "r2", PARAMETER_SERVER_ID: "r3"},
         {"n1": "r2", PARAMETER_SERVER_ID: "r-head"}],
        views,
    )  # fmt: skip
    assert launches[0] == {"n1": "n1", "n2": "n2", PARAMETER_SERVER_ID: "n3"}
    assert launches[1] == {"n1": "n2", PARAMETER_SERVER_ID: None}
    assert misplaced(launches[0], PARAMETER_SERVER_ID) == []
    assert misplaced(launches[1], PARAMETER_SERVER_ID) == ["n1 ran on n2"]
