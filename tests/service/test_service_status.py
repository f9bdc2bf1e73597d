"""The one transition table: what it allows is exactly what the store lets happen."""

from __future__ import annotations

import itertools

import pytest
from _service_helpers import demo_manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import ConflictError, IllegalTransitionError
from deepedge.service.status import (
    ACTIONS,
    TERMINAL,
    TRANSITIONS,
    Action,
    JobStatus,
    check_action,
    check_transition,
    is_legal,
)
from deepedge.service.store import JobStore

PAIRS = list(itertools.product(JobStatus, JobStatus))


@pytest.mark.parametrize(("current", "target"), PAIRS)
def test_check_transition_matches_table(current: JobStatus, target: JobStatus) -> None:
    if target in TRANSITIONS[current]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalTransitionError, match=f"cannot become {target}"):
            check_transition(current, target)


def test_terminal_states_have_no_exit_and_every_state_can_fail_or_is_final() -> None:
    for status in JobStatus:
        if status in TERMINAL:
            assert not TRANSITIONS[status]
        elif status is not JobStatus.HALTED:
            assert JobStatus.FAILED in TRANSITIONS[status]


def test_happy_path_and_every_state_reachable_from_queued() -> None:
    path = [JobStatus.QUEUED, JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING,
            JobStatus.STORING, JobStatus.COMPLETED]  # fmt: skip
    assert all(is_legal(a, b) for a, b in itertools.pairwise(path))
    seen, frontier = {JobStatus.QUEUED}, [JobStatus.QUEUED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobStatus)


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(st.lists(st.sampled_from(list(JobStatus)), min_size=1, max_size=25))
def test_random_walks_never_pass_an_illegal_edge(targets: list[JobStatus]) -> None:
    """Apply arbitrary requested targets; only table edges are ever taken."""
    current = JobStatus.QUEUED
    for target in targets:
        try:
            check_transition(current, target)
        except IllegalTransitionError:
            assert target not in TRANSITIONS[current]
            continue
        assert target in TRANSITIONS[current]
        current = target


@pytest.mark.parametrize("target", [JobStatus.COMPLETED, JobStatus.PROCESSING, JobStatus.STORING])
def test_store_refuses_illegal_transition_and_writes_nothing(
    store: JobStore, target: JobStatus
) -> None:
    tenant = store.create_tenant("t", "tok")
    job, _ = store.submit(tenant, demo_manifest())
    with pytest.raises(IllegalTransitionError):
        store.transition(job.id, target, "not allowed from QUEUED")
    assert store.get(job.id).status is JobStatus.QUEUED
    assert [h.status for h in store.history(job.id)] == [JobStatus.QUEUED]


# What the API answered before the action table existed, status by status.
ACTION_CASES = [
    (Action.HALT, JobStatus.QUEUED, None),
    (Action.HALT, JobStatus.STORING, None),
    (Action.HALT, JobStatus.HALTED, "job j is already HALTED"),
    (Action.HALT, JobStatus.COMPLETED, "job j is COMPLETED; nothing to halt"),
    (Action.CHECKPOINT, JobStatus.RESTARTED, None),
    (Action.CHECKPOINT, JobStatus.PENDING, "job j is PENDING; only running jobs checkpoint"),
    (Action.CHECKPOINT, JobStatus.FAILED, "job j is FAILED; nothing to checkpoint"),
    (Action.RESUME, JobStatus.HALTED, None),
    (Action.RESUME, JobStatus.COMPLETED, "job j is COMPLETED; only HALTED jobs resume"),
    (Action.DELETE, JobStatus.FAILED, None),
    (Action.DELETE, JobStatus.PROCESSING, "job j is PROCESSING; halt it before deleting it"),
]


@pytest.mark.parametrize(("action", "status", "refusal"), ACTION_CASES)
def test_check_action_allows_the_table_and_names_the_refusal(
    action: Action, status: JobStatus, refusal: str | None
) -> None:
    assert (status in ACTIONS[action]) is (refusal is None)
    if refusal is None:
        check_action("j", status, action)
    else:
        with pytest.raises(ConflictError) as caught:
            check_action("j", status, action)
        assert caught.value.message == refusal


def test_only_halted_jobs_resume_and_only_nothing_running_is_deleted() -> None:
    assert ACTIONS[Action.RESUME] == {JobStatus.HALTED} <= ACTIONS[Action.DELETE]
    assert ACTIONS[Action.HALT].isdisjoint(TERMINAL | {JobStatus.HALTED})
    assert ACTIONS[Action.CHECKPOINT] <= ACTIONS[Action.HALT]
