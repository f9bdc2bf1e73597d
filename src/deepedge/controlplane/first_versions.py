"""A deployment's first version: trained from its base windows, off the loop's windows.

Training a first version costs seconds of CPU (the site's digits CNN here, a user's model
in the tenant's sandbox): done inside a tick it would delay every other deployment's
window. So it runs in a background thread of lower CPU priority, one at a time, and the
loop registers the version once its export exists (written atomically: it exists once
whole). A training that failed is said as the deployment's ``error`` event and tried again
after ``FIRST_RETRY_S``. ``inline`` (tests that inject time) trains in the tick itself.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from deepedge.controlplane.artifacts import served_path
from deepedge.controlplane.deployments import Step, VersionChange
from deepedge.controlplane.records import (
    DATA_SEVERITY,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus

if TYPE_CHECKING:
    from deepedge.controlplane.site import Site

log = logging.getLogger(__name__)

D, V = DeploymentStatus, VersionStatus
FIRST_RETRY_S = 60.0  # a first version whose training failed is tried again after this
FIRST_VERSION_NICE = 10  # the background training's niceness above the loop's own


def lower_thread_priority() -> None:
    """Lower the calling thread's CPU priority by ``FIRST_VERSION_NICE`` (Linux schedules
    threads alone: a thread id is a valid ``PRIO_PROCESS`` target), so that a burst of first
    versions trained in the background takes the cores the loop's windows do not need."""
    try:
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + FIRST_VERSION_NICE
        )
    except (AttributeError, OSError) as exc:  # not Linux, or not permitted: run as is
        log.info("first-version thread keeps its priority (%s)", exc)


class FirstVersions:
    """The first versions in training (module docstring)."""

    def __init__(self, site: Callable[[], Site], artifact: Callable[[DeploymentRecord, int], Path],
                 inline: bool) -> None:  # fmt: skip
        self.site = site
        self.artifact = artifact
        self.inline = inline
        self._pool: ThreadPoolExecutor | None = None
        self._training: dict[tuple[str, int], Future[None]] = {}
        self._failed: dict[tuple[str, int], float] = {}  # when its training last failed
        self._lock = threading.Lock()

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def ready(self, deployment: DeploymentRecord, version: ModelVersion, now: float,
              failed: Callable[[Exception], None]) -> bool:  # fmt: skip
        """Whether the version is trained and exported (then it may be registered); else
        its training is started, or its failure reported through ``failed`` once."""
        path = self.artifact(deployment, version.number)
        if self.inline and not served_path(path).exists():
            self.site().write_first(deployment, path)
        key = (deployment.id, version.number)
        if served_path(path).exists():
            with self._lock:
                self._failed.pop(key, None)
                self._training.pop(key, None)
            return True
        with self._lock:
            running = self._training.get(key)
            if running is not None and running.done() and running.exception() is not None:
                failure = running.exception()
                assert isinstance(failure, Exception)
                self._training.pop(key)
                self._failed[key] = now
            elif running is None and now >= self._failed.get(key, -math.inf) + FIRST_RETRY_S:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        1, thread_name_prefix="first-version", initializer=lower_thread_priority
                    )
                self._training[key] = self._pool.submit(self.site().write_first, deployment, path)
                return False
            else:
                return False
        log.error("training the first version of %s failed: %s", deployment.name, failure)
        failed(failure)
        return False


def register_first(deployment: DeploymentRecord, version: ModelVersion, now: float) -> Step:
    """The first version serves at once (it learned the base windows' true labels)."""
    n = version.number
    return Step(
        deployment={"status": D.ACTIVE, "serving_version": n, "next_window_at": now},
        versions=(
            # it learned the base windows, which drift severity is measured from
            VersionChange(n, V.CANDIDATE, metrics={"epochs": deployment.spec.base_epochs,
                                                   DATA_SEVERITY: 0.0}),
            VersionChange(n, V.SERVING),
        ),
        events=(
            Event(EventKind.VERSION_REGISTERED, f"v{n} trained offline on windows "
                  f"{list(version.data_windows)}", version=n),
            Event(EventKind.PROMOTED, f"v{n} serves on every node (first version)", version=n),
        ),
    )  # fmt: skip
