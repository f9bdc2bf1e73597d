"""The resource monitor's bookkeeping: update status, failures and the three-strike rule.

Deep-Edge (Sec. IV-B3, IV-C3): the Resource Monitor keeps the map of active workers and
watches running updates; on a worker failure it kills the update's other processes and
re-triggers the update; a worker with at least three interruptions is no longer part of
the cluster. This module holds the state those rules act on; detecting, killing and
restarting are the update's (:mod:`deepedge.runtime.training.update`), through its executor's
launch (Ray actors: :mod:`~deepedge.runtime.training.ray_launch`; threads of one process:
:mod:`~deepedge.runtime.training.thread_launch`).

Status diagram of one model update::

    PENDING -> PLANNING -> RUNNING -> COMPLETED
                  ^           |  \\-> FAILED
                  |           v
                  +------ RESTARTING -> FAILED
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deepedge.core.errors import IllegalTransitionError

STRIKES_TO_EXCLUDE = 3  # the three-strike rule


class UpdateStatus(enum.Enum):
    """Life cycle of one model update (diagram in the module docstring)."""

    PENDING = "pending"
    PLANNING = "planning"
    RUNNING = "running"
    RESTARTING = "restarting"
    COMPLETED = "completed"
    FAILED = "failed"


TRANSITIONS: Mapping[UpdateStatus, frozenset[UpdateStatus]] = {
    UpdateStatus.PENDING: frozenset({UpdateStatus.PLANNING, UpdateStatus.FAILED}),
    UpdateStatus.PLANNING: frozenset({UpdateStatus.RUNNING, UpdateStatus.FAILED}),
    UpdateStatus.RUNNING: frozenset(
        {UpdateStatus.RESTARTING, UpdateStatus.COMPLETED, UpdateStatus.FAILED}
    ),
    UpdateStatus.RESTARTING: frozenset({UpdateStatus.PLANNING, UpdateStatus.FAILED}),
    UpdateStatus.COMPLETED: frozenset(),
    UpdateStatus.FAILED: frozenset(),
}


def check_transition(current: UpdateStatus, new: UpdateStatus) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current -> new`` is in the table."""
    if new not in TRANSITIONS[current]:
        raise IllegalTransitionError(
            f"illegal update transition {current.value} -> {new.value}",
            current=current.value,
            new=new.value,
        )


PARAMETER_SERVER_ID = "parameter-server"


class FailureKind(enum.Enum):
    PROCESS_DIED = "process-died"  # the worker actor's process exited or its node was lost
    MISSED_HEARTBEAT = "missed-heartbeat"  # no epoch completion within the epoch timeout
    PS_DIED = "ps-died"  # the parameter server's process exited (no worker's strike)
    NODE_LOST = "node-lost"  # the node under the worker stopped its heartbeats (live cluster)
    NODE_DRAINED = "node-drained"  # its node drains (a graceful leave): moved, no strike


class InjectedCrash(Exception):
    """A crash injected (:class:`~deepedge.runtime.training.update_config.FaultInjection`) into a
    worker or the parameter server that runs as a thread of the update's process: where
    each has a process of its own the process exits instead (``os._exit``), which a
    thread cannot do without taking the update with it."""


@dataclass(frozen=True)
class FailureEvent:
    worker_id: str  # PARAMETER_SERVER_ID when the parameter server failed
    kind: FailureKind
    epoch: int
    strikes: int  # the worker's strike count after this failure
    excluded: bool  # this failure was its third strike
    detail: str = ""


@dataclass(frozen=True)
class UpdateEvent:
    """One line of the update's status history (what a job status shows)."""

    at_s: float  # wall-clock time.time()
    status: UpdateStatus
    message: str
    data: dict[str, Any] = field(default_factory=dict)


class StrikeBook:
    """Interruptions per worker; ``excluded`` once a worker has ``threshold`` strikes."""

    def __init__(
        self, strikes: Mapping[str, int] | None = None, threshold: int = STRIKES_TO_EXCLUDE
    ) -> None:
        self.threshold = threshold
        self._strikes: dict[str, int] = dict(strikes or {})

    def record(self, worker_id: str) -> int:
        self._strikes[worker_id] = self._strikes.get(worker_id, 0) + 1
        return self._strikes[worker_id]

    def count(self, worker_id: str) -> int:
        return self._strikes.get(worker_id, 0)

    def is_excluded(self, worker_id: str) -> bool:
        return self.count(worker_id) >= self.threshold

    @property
    def excluded(self) -> list[str]:
        return sorted(w for w, n in self._strikes.items() if n >= self.threshold)

    def as_dict(self) -> dict[str, int]:
        return dict(self._strikes)


class StatusLog:
    """The update's current status and its timestamped history; checks every transition."""

    def __init__(self, on_event: Callable[[UpdateEvent], None] | None = None) -> None:
        self.status = UpdateStatus.PENDING
        self.events: list[UpdateEvent] = [
            UpdateEvent(time.time(), UpdateStatus.PENDING, "update requested")
        ]
        self._on_event = on_event

    def move(self, new: UpdateStatus, message: str, **data: Any) -> None:
        check_transition(self.status, new)
        self.status = new
        self.note(message, **data)

    def note(self, message: str, **data: Any) -> None:
        event = UpdateEvent(time.time(), self.status, message, data)
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)
