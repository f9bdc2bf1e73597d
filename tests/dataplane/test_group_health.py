"""A suspect replica group is tried last, probed once a second, and cleared by an answer."""

from __future__ import annotations

from deepedge.dataplane.group_health import GroupHealth

GROUPS = ["b8_n1", "b8_n2", "b8_head"]  # the routed group first, then its fallbacks


def test_a_healthy_plan_keeps_its_order() -> None:
    assert GroupHealth().order(GROUPS, now=0.0) == GROUPS


def test_a_failed_group_is_tried_last_until_its_probe_is_due() -> None:
    health = GroupHealth(suspect_s=10.0, probe_s=1.0)
    health.failed("b8_n1", now=100.0)
    assert health.order(GROUPS, 100.2) == ["b8_n2", "b8_head", "b8_n1"]
    assert health.order(GROUPS, 100.9) == ["b8_n2", "b8_head", "b8_n1"]
    assert health.order(GROUPS, 101.0) == GROUPS  # this request probes it in its place ...
    assert health.order(GROUPS, 101.1) == ["b8_n2", "b8_head", "b8_n1"]  # ... one only
    assert health.order(GROUPS, 102.1) == GROUPS  # the next probe, a second later
    assert health.suspect(102.1) == {"b8_n1"}


def test_an_answer_clears_the_suspicion_and_it_lapses_on_its_own() -> None:
    health = GroupHealth(suspect_s=10.0, probe_s=1.0)
    health.failed("b8_n1", now=0.0)
    health.answered("b8_n1")  # the probe (or another camera's fallback) was answered
    assert health.order(GROUPS, 0.5) == GROUPS and health.suspect(0.5) == set()
    health.failed("b8_n2", now=0.0)
    health.order(GROUPS, 1.0)  # its probe
    assert health.order(GROUPS, 10.5) == GROUPS  # past suspect_s: tried in its place again


def test_a_probe_that_fails_again_keeps_it_suspect() -> None:
    health = GroupHealth(suspect_s=10.0, probe_s=1.0)
    health.failed("b8_n1", now=0.0)
    assert health.order(GROUPS, 1.0)[0] == "b8_n1"  # probed
    health.failed("b8_n1", now=4.0)  # no answer within the router's timeout
    assert health.order(GROUPS, 4.5)[-1] == "b8_n1"
    assert health.suspect(13.9) == {"b8_n1"} and health.suspect(14.0) == set()
