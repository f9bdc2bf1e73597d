"""A graceful leave while serving, on one Ray node that carries the three deepedge nodes'
resources: the placed deployment of ``_placed_deployment`` is served on n1 and n2, then n1
leaves the node registry (its agent's goodbye, as on SIGTERM); the controller moves n1's
group to the spare node while n1 still serves, routes n1's camera there once it runs, and
only then retires n1's group; at least 99 % of the requests are answered meanwhile, every
one after the move, and the camera router is the same replica throughout; the control loop
then records the move, with its cause, as the deployment's one ``move`` event."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from _placed_deployment import (
    CAMERAS,
    NODES,
    Placed,
    check_routed,
    controller,
    group_name,
    group_replicas,
    infer,
    ray_node_of,
    router_replicas,
    start_placed,
)

from _support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Placed]:
    import ray
    from ray import serve

    from deepedge.runtime.cluster.session import patient_raylet_wait

    if ray.is_initialized():
        ray.shutdown()
    with patient_raylet_wait():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False,
                 resources={f"deepedge-node:{n}": 1 for n in NODES})  # fmt: skip
    store = None
    try:
        served, store = start_placed(tmp_path_factory.mktemp("drain"), None)
        yield served
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()
        if store is not None:
            store.dispose()


def _registry(nodes: tuple[str, ...]) -> Any:
    """The node registry with a report of every node (no heartbeats follow: long patience)."""
    import ray

    from deepedge.cluster.devices import DeviceType
    from deepedge.cluster.reports import NodeReport
    from deepedge.cluster.state import NodeState
    from deepedge.runtime.cluster.node_agent import registry

    reg = registry(lost_after_s=3600.0)
    for node in nodes:
        report = NodeReport(node, DeviceType.RASPBERRY_PI_4, NodeState(0.1, 0.1), 4096.0, 2048.0)
        ray.get(reg.heartbeat.remote(report))
    return reg


def test_replicas_run_on_the_named_nodes_and_cameras_are_answered_as_routed(
    placed: Placed,
) -> None:
    check_routed(placed)


def test_a_leaving_node_is_drained_while_requests_are_answered(placed: Placed) -> None:
    import ray

    variant, leaving = placed.routes["c1"]
    router = router_replicas()
    reg = _registry(NODES)
    ray.get(reg.leave.remote(leaving))
    statuses: list[int] = []
    nodes: list[str] = []

    def moved() -> bool:
        for camera in CAMERAS:
            status, params, headers = infer(placed, camera)
            statuses.append(status)
            if camera == "c1" and status == 200 and headers.get("deepedge-fallback") == "0":
                nodes.append(params["node"])
        return bool(nodes) and nodes[-1] == "head"

    assert wait_until(moved, timeout_s=120, interval_s=0.2), nodes[-5:]
    before = len(statuses)

    def retired() -> bool:  # the old group goes once the router has left it
        moved()
        return group_name(variant, leaving) not in group_replicas()

    assert wait_until(retired, timeout_s=60, interval_s=0.2)
    after = statuses[before:]
    answered = statuses.count(200)
    print(f"drain: {answered} of {len(statuses)} requests answered "
          f"({len(after)} after the move, {after.count(200)} of them answered)")  # fmt: skip
    assert answered >= 0.99 * len(statuses), (answered, len(statuses), Counter(statuses))
    assert after and all(status == 200 for status in after), Counter(after)
    assert nodes[-1] == "head"  # c1 stays on its group's new node
    decisions = ray.get(controller().decisions.remote())
    assert [d.lost for d in decisions if d.model == "t.cam"] == [(leaving,)]
    assert f"{leaving} not alive" in decisions[-1].cause
    replicas = group_replicas()
    assert replicas.get(group_name(variant, "head")) == {ray_node_of("head")}
    assert router_replicas() == router  # the router stayed: only the groups moved
    # the control loop records the move as the deployment's event, once, with its cause
    events = _move_events(placed)
    assert len(events) == 1, [e.message for e in events]
    assert events[0].message.startswith(f"{variant} group of c1 moved from {leaving} to head: ")
    assert f"{leaving} not alive" in events[0].message
    assert events[0].detail["decided_at"] == decisions[-1].at
    assert events[0].detail["lost"] == [leaving]
    assert "head" in events[0].detail["to_nodes"] and leaving not in events[0].detail["to_nodes"]
    assert _move_events(placed) == events  # a restarted loop records nothing twice


def _move_events(placed: Placed) -> list[Any]:
    """One tick's recording of the data plane's moves by a fresh control loop on the
    service's store and data folder, and the deployment's ``move`` events after it."""
    from deepedge.controlplane.deployments import DeploymentStore
    from deepedge.controlplane.loop import ControlPlane
    from deepedge.controlplane.records import DeploymentId, EventKind
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore, sqlite_url

    store = JobStore(sqlite_url(placed.data_dir / "service.db"))
    try:
        ControlPlane(store, ServiceSettings(data_dir=placed.data_dir)).moves.record()
        events = DeploymentStore(store).events(DeploymentId(placed.deployment_id))
        return [e for e in events if e.kind is EventKind.MOVE]
    finally:
        store.dispose()
