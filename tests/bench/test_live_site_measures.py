"""What bench.live_site reads from its cameras' requests (no cluster)."""

from __future__ import annotations

import pytest

from deepedge.bench.live_site import (
    Answer,
    availability,
    placement_problem,
    route_match,
    share_applied,
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


def test_the_share_is_applied_when_the_node_and_threads_match() -> None:
    answers = [
        Answer("", 1.0, "-@head", threads=1),  # before the allocation: not judged
        Answer("", 5.0, "-@head", threads=2),
        Answer("", 6.0, "-@head", threads=2),
        Answer("", 7.0, "-@n1", threads=2),  # the wrong node
        Answer("", 8.0, "-@head", threads=1),  # not yet applied
        Answer("", 9.0, None),
    ]
    assert share_applied(answers, 2, "head", since=4.0) == pytest.approx(2 / 4)


def test_the_site_problem_routes_each_camera_nearest_its_node() -> None:
    from deepedge.planning.placement import plan_placement
    from deepedge.planning.placement.model import PlacementProblem

    solution = plan_placement(PlacementProblem.model_validate(placement_problem()), "heuristic",
                              10.0)  # fmt: skip
    routes = {r.source: r.node for r in solution.routes}
    assert routes == {"c1": "n1", "c2": "n2", "c3": "n3"}  # the head spare
