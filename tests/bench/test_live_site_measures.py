"""What bench.live_site reads from its cameras' requests (no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from deepedge.bench.harness.cameras import Answer
from deepedge.bench.live_site import placement_problem
from deepedge.bench.live_site_parts import (
    availability,
    ekya_allocations,
    route_match,
    share_applied,
    share_threads,
    update_actors_named,
    update_recovered,
)

ROUTES = {"c1": "b8@n1", "c2": "b8@n2"}


def test_route_match_counts_answered_requests_before_the_fault_only() -> None:
    answers = [
        Answer("c1", 1.0, "b8@n1"),
        Answer("c2", 2.0, "b8@n2"),
        Answer("c2", 3.0, "b8@n1"),  # a fallback: not as routed
        Answer("c1", 4.0, None),  # not answered: availability's, not routing's
        Answer("c1", 9.0, "b8@head"),  # after the fault
    ]
    assert route_match(answers, ROUTES, until=5.0) == pytest.approx(2 / 3)
    assert route_match([], ROUTES, until=5.0) == 0.0


def test_availability_is_answered_over_sent_in_the_interval() -> None:
    answers = [Answer("c1", t, None if t in {11.0, 12.0} else "b8@n1") for t in range(5, 25)]
    assert availability(answers, 10.0, 20.0) == (pytest.approx(0.8), 10)
    assert availability(answers, 100.0, 200.0) == (0.0, 0)


def test_the_share_is_applied_when_node_share_and_threads_match_the_allocation_in_force() -> None:
    allocations = [(10.0, 2.4), (30.0, 0.6)]  # (recorded at, share): 2 threads, then 1
    answers = [
        Answer("e", 5.0, "-@head", threads=1, share=None),  # before any allocation: not judged
        Answer("e", 12.0, "-@head", threads=1, share=None),  # settling (the long poll)
        Answer("e", 16.0, "-@head", threads=2, share=2.4),
        Answer("e", 20.0, "-@n1", threads=2, share=2.4),  # the wrong node
        Answer("e", 25.0, "-@head", threads=1, share=2.4),  # the share, not its threads
        Answer("e", 26.0, "-@head", threads=2, share=None),  # threads, the share not known
        Answer("e", 36.0, "-@head", threads=1, share=0.6),  # the second window's
        Answer("e", 37.0, None),  # not answered: not judged
        Answer("other", 37.0, "-@head", threads=2, share=2.4),  # another stream's camera
    ]
    assert share_applied(answers, "e", allocations, "head", settle_s=5.0) == pytest.approx(2 / 5)
    assert share_applied(answers, "e", [], "head", settle_s=5.0) == 0.0
    assert [share_threads(s) for s in (0.4, 1.4, 1.6, 3.0)] == [1, 1, 2, 3]


def test_ekya_allocations_read_each_window_s_own_share() -> None:
    def event(at: float, share: float, kind: str = "allocation") -> dict[str, Any]:
        streams = [{"stream_id": "e", "inference_gpus": share},
                   {"stream_id": "f", "inference_gpus": 0.1}]  # fmt: skip
        return {"kind": kind, "at": at,
                "detail": {"policy": "ekya-window", "stream": "e", "streams": streams}}  # fmt: skip

    history = [event(1.0, 0.4), event(2.0, 1.6), event(3.0, 0.9, "trigger")]
    assert ekya_allocations(history) == [(1.0, 0.4), (2.0, 1.6)]


def test_the_site_problem_routes_each_camera_nearest_its_node() -> None:
    from deepedge.planning.placement import plan_placement
    from deepedge.planning.placement.model import PlacementProblem

    solution = plan_placement(PlacementProblem.model_validate(placement_problem()), "heuristic",
                              10.0)  # fmt: skip
    routes = {r.source: r.node for r in solution.routes}
    assert routes == {"c1": "n1", "c2": "n2", "c3": "n3"}  # the head spare


def _allocation(placements: list[dict[str, str]]) -> dict[str, Any]:
    return {"kind": "allocation", "version": 2, "at": 9.0,
            "detail": {"placements": placements, "ps_node": "head"}}  # fmt: skip


FIRST = {"n1": "n1", "n2": "n2", "parameter-server": "head"}
AGAIN = {"n2": "n2", "parameter-server": "head"}


def test_the_update_recovered_when_it_relaunched_without_the_lost_node() -> None:
    assert update_recovered([_allocation([FIRST, AGAIN])], "n1")
    assert not update_recovered([_allocation([FIRST])], "n1")  # never relaunched
    assert not update_recovered([_allocation([FIRST, FIRST])], "n1")  # still on it
    assert not update_recovered([_allocation([AGAIN, AGAIN])], "n1")  # the loss missed it
    assert not update_recovered([], "n1")  # no version


def test_update_actors_are_judged_against_the_first_launch_they_belong_to() -> None:
    seen = [("TrainingWorker", "n1"), ("TrainingWorker", "n3"), ("ParameterServer", "head")]
    assert update_actors_named(seen, [_allocation([FIRST, AGAIN])]) == (2, 3)  # n3 not named
    assert update_actors_named(seen, []) == (0, 3)  # no decision: none named
