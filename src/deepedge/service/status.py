"""Job status: one enum, one transition table, one function that checks it.

State diagram (every arrow is an entry of :data:`TRANSITIONS`; anything else is illegal)::

                 admit            deploy             all parts up
    QUEUED ──────────▶ PENDING ─────────▶ DEPLOYING ──────────────▶ PROCESSING
      ▲                  ▲  │                │  │                   │  ▲   │
      │                  │  │   rollback +   │  │         learner   │  │   │ learners
      │ resume           │  │   backoff      │  │         crashed   ▼  │   │ exited 0
      │                  │  └────────────────┘  │              RESTARTED  │
      │                  └──────────────────────┘                (from    ▼
      │                                                        checkpoint) STORING
      │                                                                    │
    HALTED ◀──── halt (from QUEUED, PENDING, DEPLOYING, PROCESSING,        │ results
                        RESTARTED)                                         ▼ kept
                                                                       COMPLETED
    FAILED ◀──── from any non-terminal state, always with an error code and a cause

``COMPLETED`` and ``FAILED`` are terminal; ``HALTED`` only leaves through resume.

A user's actions on a job (:class:`Action`) are allowed in the states of :data:`ACTIONS`,
checked by :func:`check_action`.
"""

from __future__ import annotations

import enum

from deepedge.core.errors import ConflictError, IllegalTransitionError


class JobStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    PENDING = "PENDING"
    DEPLOYING = "DEPLOYING"
    PROCESSING = "PROCESSING"
    RESTARTED = "RESTARTED"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"


S = JobStatus

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.PENDING, S.HALTED, S.FAILED}),
    S.PENDING: frozenset({S.DEPLOYING, S.HALTED, S.FAILED}),
    S.DEPLOYING: frozenset({S.PROCESSING, S.PENDING, S.HALTED, S.FAILED}),
    S.PROCESSING: frozenset({S.STORING, S.RESTARTED, S.HALTED, S.FAILED}),
    S.RESTARTED: frozenset({S.PROCESSING, S.HALTED, S.FAILED}),
    S.STORING: frozenset({S.COMPLETED, S.FAILED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.HALTED: frozenset({S.QUEUED}),
}

TERMINAL: frozenset[JobStatus] = frozenset({S.COMPLETED, S.FAILED})
"""No transition leaves these."""

ACTIVE: frozenset[JobStatus] = frozenset({S.DEPLOYING, S.PROCESSING, S.RESTARTED, S.STORING})
"""States in which a job holds resources (counted against quotas)."""

DELETABLE: frozenset[JobStatus] = frozenset({S.COMPLETED, S.FAILED, S.HALTED})
"""A job may only be deleted when nothing of it runs."""


def is_legal(current: JobStatus, target: JobStatus) -> bool:
    return target in TRANSITIONS[current]


def check_transition(current: JobStatus, target: JobStatus) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current -> target`` is in the table."""
    if not is_legal(current, target):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (terminal)"
        raise IllegalTransitionError(
            f"a {current} job cannot become {target}; allowed from {current}: {allowed}",
            current=str(current),
            target=str(target),
        )


class Action(enum.StrEnum):
    """What a user may do to a job. ``HALT`` and ``CHECKPOINT`` are requests stored on the
    job's row for the manager to carry out; ``RESUME`` and ``DELETE`` take effect at once."""

    HALT = "HALT"
    CHECKPOINT = "CHECKPOINT"
    RESUME = "RESUME"
    DELETE = "DELETE"


ACTIONS: dict[Action, frozenset[JobStatus]] = {
    Action.HALT: frozenset(JobStatus) - TERMINAL - {S.HALTED},
    Action.CHECKPOINT: frozenset({S.PROCESSING, S.RESTARTED}),
    Action.RESUME: frozenset({S.HALTED}),
    Action.DELETE: DELETABLE,
}
"""The states in which each action is allowed (a halt asked while STORING waits for it)."""

_REFUSALS: dict[Action, str] = {
    Action.CHECKPOINT: "only running jobs checkpoint",
    Action.RESUME: "only HALTED jobs resume",
    Action.DELETE: "halt it before deleting it",
}


def check_action(job_id: str, current: JobStatus, action: Action) -> None:
    """Raise :class:`ConflictError` unless ``action`` is allowed in ``current``."""
    if current in ACTIONS[action]:
        return
    if action is Action.HALT and current is S.HALTED:
        raise ConflictError(f"job {job_id} is already HALTED")
    if current in TERMINAL and action in {Action.HALT, Action.CHECKPOINT}:
        raise ConflictError(f"job {job_id} is {current}; nothing to {action.value.lower()}")
    raise ConflictError(f"job {job_id} is {current}; {_REFUSALS[action]}")


class ErrorCode(enum.StrEnum):
    """Why a job failed; each code comes with a message telling the user what to do."""

    DEPLOY_FAILED = "DEPLOY_FAILED"
    LEARNER_FAILED = "LEARNER_FAILED"
    RESTARTS_EXHAUSTED = "RESTARTS_EXHAUSTED"
    STORE_FAILED = "STORE_FAILED"
    KIND_UNAVAILABLE = "KIND_UNAVAILABLE"
    MEMORY_LIMIT = "MEMORY_LIMIT"  # its memory cgroup's OOM killer ended a learner
    DISK_QUOTA = "DISK_QUOTA"  # its tenant's folders passed the tenant's disk quota
