"""What the manager did to recover, counted: learners re-attached after a restart,
learners restarted, deploys rolled back or adopted. The counters are published as a small
JSON file (rewritten on each change) for an API that runs in another process, which
exports them as ``deepedge_recovery_events_total``."""

from __future__ import annotations

import collections
import enum
import logging
from pathlib import Path

from deepedge.service.durable_files import write_atomic

log = logging.getLogger(__name__)


class RecoveryEvent(enum.StrEnum):
    REATTACHED = "reattached"  # learner found alive after a service restart
    LEARNER_RESTARTED = "learner_restarted"
    DEPLOY_ROLLED_BACK = "deploy_rolled_back"
    DEPLOY_ADOPTED = "deploy_adopted"  # a deploy cut short whose learners had started


class RecoveryCounters:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.counts: collections.Counter[RecoveryEvent] = collections.Counter()

    def document(self) -> dict[str, int]:
        return {event.value: count for event, count in self.counts.items()}

    def count(self, event: RecoveryEvent) -> None:
        self.counts[event] += 1
        self.publish()

    def publish(self) -> None:
        if self.path is not None:
            try:
                write_atomic(self.path, self.document())
            except OSError as exc:
                log.warning("could not publish recovery events: %s", exc)
