"""The registry's rules on injected time, and the ClusterSpec built from agent reports."""

from __future__ import annotations

import dataclasses

import pytest

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.reports import (
    AppReport,
    NodeBook,
    NodeReport,
    NodeStatus,
    check_transition,
)
from deepedge.cluster.state import NodeState
from deepedge.core.errors import IllegalTransitionError, InvalidInputError, NotFoundError
from deepedge.planning.sharding.live_spec import choose_ps_node, cluster_spec
from deepedge.runtime.cluster.node_agent import parse_app


def report(node_id: str, cpu: float = 0.2, device: DeviceType = DeviceType.RASPBERRY_PI_4,
           gpu: float | None = None, apps: tuple[AppReport, ...] = ()) -> NodeReport:  # fmt: skip
    return NodeReport(
        node_id=node_id,
        device=device,
        state=NodeState(cpu_util=cpu, mem_util=0.3, gpu_util=gpu),
        mem_total_mb=4096.0,
        mem_capacity_mb=3600.0,
        apps=apps,
    )


@pytest.mark.parametrize(
    ("last_report_s", "left", "now_s", "expected"),
    [
        (10.0, False, 12.9, NodeStatus.ALIVE),
        (10.0, False, 13.0, NodeStatus.ALIVE),  # exactly lost_after_s: still alive
        (10.0, False, 13.01, NodeStatus.LOST),
        (10.0, True, 10.5, NodeStatus.LEFT),
        (10.0, True, 99.0, NodeStatus.LEFT),
    ],
)
def test_status_follows_the_heartbeats(
    last_report_s: float, left: bool, now_s: float, expected: NodeStatus
) -> None:
    book = NodeBook(lost_after_s=3.0)
    book.record(report("a"), 0.0)
    book.record(report("a"), last_report_s)
    if left:
        book.leave("a", last_report_s + 0.1)
    (view,) = book.views(now_s)
    assert view.status is expected
    assert (view.lost_since_s is not None) == (expected is NodeStatus.LOST)
    if expected is NodeStatus.LOST:  # lost since its last report and lost_after_s
        assert view.lost_since_s == pytest.approx(last_report_s + 3.0)
        assert view.lost_for_s == pytest.approx(now_s - last_report_s - 3.0)
    else:
        assert view.lost_for_s is None


def test_a_lost_node_comes_back_with_its_next_report() -> None:
    book = NodeBook(lost_after_s=1.0)
    book.record(report("a"), 0.0)
    book.record(report("b"), 0.0)
    book.record(report("b"), 4.5)
    assert book.not_alive(["a", "b", "ghost"], 5.0) == {"a", "ghost"}
    book.record(report("a", cpu=0.9), 5.0)
    assert [r.node_id for r in book.alive(5.0)] == ["a", "b"]
    assert book.alive(5.0)[0].state.cpu_util == 0.9  # the latest report wins


def test_transitions_are_checked_and_bad_settings_refused() -> None:
    check_transition(NodeStatus.LOST, NodeStatus.ALIVE)
    with pytest.raises(IllegalTransitionError):
        check_transition(NodeStatus.LEFT, NodeStatus.LOST)
    with pytest.raises(InvalidInputError):
        NodeBook(lost_after_s=0.0)
    with pytest.raises(NotFoundError):
        NodeBook().leave("nobody", 0.0)


def _seq(node_id: str, seq: int, ray_node: str = "r1") -> NodeReport:
    return dataclasses.replace(report(node_id), seq=seq, ray_node_id=ray_node)


@pytest.mark.parametrize(
    ("after_drain", "now_s", "expected"),
    [
        ([], 1.5, NodeStatus.DRAINING),  # drained, still reporting
        ([(4, 2.0)], 2.5, NodeStatus.DRAINING),  # its next beats keep it draining
        ([(4, 2.0)], 9.0, NodeStatus.LOST),  # silence while draining: lost
        ([(4, 2.0), (5, 9.5)], 9.6, NodeStatus.DRAINING),  # back: the drain survives
        ([(1, 2.0)], 2.5, NodeStatus.ALIVE),  # seq starts again: a new agent
    ],
)
def test_a_drain_lasts_until_the_node_leaves_or_a_new_agent_reports(
    after_drain: list[tuple[int, float]], now_s: float, expected: NodeStatus
) -> None:
    book = NodeBook(lost_after_s=3.0)
    book.record(_seq("a", 3), 0.0)
    book.drain("a", 1.0)
    for seq, at_s in after_drain:
        book.record(_seq("a", seq), at_s)
    (view,) = book.views(now_s)
    assert view.status is expected
    assert book.alive(now_s) == ([view.report] if expected is NodeStatus.ALIVE else [])
    assert book.not_alive(["a"], now_s) == (set() if expected is NodeStatus.ALIVE else {"a"})


def test_a_draining_node_leaves_and_a_left_one_cannot_drain() -> None:
    book = NodeBook(lost_after_s=3.0)
    book.record(_seq("a", 1), 0.0)
    book.drain("a", 0.5)
    book.drain("a", 0.6)  # a second SIGTERM: still draining
    book.leave("a", 1.0)
    assert book.views(1.1)[0].status is NodeStatus.LEFT
    with pytest.raises(IllegalTransitionError, match="has left"):
        book.drain("a", 1.2)
    with pytest.raises(NotFoundError):
        book.drain("nobody", 0.0)
    book.record(_seq("a", 1, ray_node="r2"), 5.0)  # a new agent on another raylet
    assert book.views(5.0)[0].status is NodeStatus.ALIVE
    assert NodeStatus.DRAINING.value == "draining"  # the data plane compares the values
    check_transition(NodeStatus.DRAINING, NodeStatus.LEFT)
    with pytest.raises(IllegalTransitionError):
        check_transition(NodeStatus.LEFT, NodeStatus.DRAINING)


def test_the_spec_holds_the_alive_nodes_with_the_ps_apart() -> None:
    sift = AppReport("cam", AppKind.SIFT, 0.2)
    reports = [report("n2", 0.5, apps=(sift,)), report("n1", 0.4), report("head", 0.1)]
    spec = cluster_spec(reports, 300, num_epochs=4, max_batch=16)
    assert spec.parameter_server.node == "head"  # the least-loaded node by default
    assert [w.id for w in spec.workers] == ["n1", "n2"]
    assert spec.workers[1].background_apps[0].deadline_s == 0.2
    assert spec.workers[0].max_batch == 16 and spec.dataset_size == 300
    pinned = cluster_spec(reports, 300, ps_node="n2", workers=["n1"])
    assert pinned.parameter_server.node == "n2" and [w.id for w in pinned.workers] == ["n1"]
    # a PS node that is gone falls back to the least-loaded of the candidates
    assert choose_ps_node(reports, "n9") == "head"
    assert cluster_spec(reports, 300, ps_candidates=["n1", "n2"]).parameter_server.node == "n1"


def test_gpu_dimension_matches_the_device_type() -> None:
    nano = report("n1", device=DeviceType.JETSON_NANO)  # a host without a GPU reading
    pi = report("n2", gpu=0.5)  # a GPU reading on a CPU-only type is dropped
    spec = cluster_spec([nano, pi, report("head", 0.0)], 100)
    by_id = {w.id: w for w in spec.workers}
    assert by_id["n1"].state.gpu_util == 0.0
    assert by_id["n2"].state.gpu_util is None


def test_no_node_left_to_train_is_an_error() -> None:
    with pytest.raises(NotFoundError):
        cluster_spec([report("head")], 100)
    with pytest.raises(NotFoundError):
        cluster_spec([], 100)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sift:0.2", AppReport("sift", AppKind.SIFT, 0.2)),
        ("dnn-inference:0.05:cam-1", AppReport("cam-1", AppKind.DNN_INFERENCE, 0.05)),
    ],
)
def test_app_specs_parse(text: str, expected: AppReport) -> None:
    assert parse_app(text) == expected


@pytest.mark.parametrize("text", ["sift", "sift:x", "sift:0", "sift:-1", "video:0.2", "a:1:b:c"])
def test_bad_app_specs_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError):
        parse_app(text)
