"""Stopping learners: one job's (a halt, a failure, a rollback) or all of them when the
service itself is stopped on purpose.

A learner is stopped through its collector (SIGTERM, SIGKILL of its session and of every
process the attempt started after the grace, named:
:meth:`~deepedge.service.supervisor.Supervisor.stop`); its row in the store is then
ended with what the collector recorded, and a collector started just before a crash that
has no row yet is found by its pid file. A stop of the whole service records
:data:`SERVICE_STOP_EXIT`, so the next start restarts the learner from its newest
checkpoint without spending one of the job's restarts (a crash records nothing: the next
manager re-attaches to learners that ran on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import psutil

from deepedge.service.attempt_processes import StoppedProcess
from deepedge.service.durable_files import read_json
from deepedge.service.records import JobRecord
from deepedge.service.store import JobStore
from deepedge.service.supervisor import Liveness, Supervisor
from deepedge.service.workspace import JobDir

log = logging.getLogger(__name__)

SERVICE_STOP_EXIT = -1000  # recorded for a learner the service's own stop ended (no signal's)
MAX_PARALLEL_STOPS = 16


def recorded_exit(seen: int | None, ended_code: int) -> int:
    """The exit code stored for a learner the service stopped: a success it reached on its
    own stays one; a service stop is recorded as such; otherwise what the collector saw,
    or ``ended_code``."""
    if seen == 0:
        return 0
    if seen is None or ended_code == SERVICE_STOP_EXIT:
        return ended_code
    return seen


class LearnerStops:
    def __init__(self, store: JobStore, supervisor: Supervisor) -> None:
        self.store = store
        self.supervisor = supervisor

    def stop(self, job: JobRecord, job_dir: JobDir, grace_s: float, ended_code: int = -1
             ) -> list[StoppedProcess]:  # fmt: skip
        """Stop every attempt of the job that may still run, recorded or only on disk; an
        attempt whose exit the collector did not record is ended with ``ended_code``.
        Returns the processes stopped (collectors, learners and what they started)."""
        stopped: list[StoppedProcess] = []
        for learner in self.store.learners(job.id):
            if learner.exit_code is None:
                stopped += self.supervisor.stop(job_dir, learner, grace_s)
                # what the collector recorded, when it did (a learner may have finished)
                seen = self.supervisor.observe(job_dir, learner)
                code = seen.exit_code if seen.liveness is Liveness.EXITED else None
                self.store.end_learner(job.id, learner.rank, learner.attempt,
                                       recorded_exit(code, ended_code), time.time())  # fmt: skip
        self.kill_unrecorded(job_dir)
        return stopped

    def stop_for_service_stop(
        self, jobs: Sequence[JobRecord], job_dir: Callable[[JobRecord], JobDir], grace_s: float
    ) -> list[str]:
        """The service is being stopped: stop the learners of ``jobs`` that run, all at once
        (each has its grace; the stop waits for the longest), and log which jobs and which
        of their processes were stopped. Returns the ids of the jobs stopped."""
        running = [
            (job, live)
            for job in jobs
            if (live := [lr for lr in self.store.learners(job.id) if lr.exit_code is None])
        ]

        def stop_one(job: JobRecord) -> list[StoppedProcess] | None:
            try:
                return self.stop(job, job_dir(job), grace_s, SERVICE_STOP_EXIT)
            except Exception:
                log.exception("could not stop the learners of job %s", job.id)
                return None

        if not running:
            return []
        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_STOPS, len(running))) as pool:
            done = list(pool.map(stop_one, [job for job, _ in running]))
        stopped: list[str] = []
        for (job, live), processes in zip(running, done, strict=True):
            if processes is not None:
                stopped.append(job.id)
                log.warning("service stopping: stopped job %s (%s, %d learner(s)): processes "
                            "%s; it restarts from its newest checkpoint when the service "
                            "starts again", job.id, job.name, len(live),
                            ", ".join(p.describe() for p in processes) or "none left")  # fmt: skip
        return stopped

    def record_ended(self, job: JobRecord) -> None:
        """After a rollback: every attempt the guardian stopped is marked ended in the store."""
        for learner in self.store.learners(job.id):
            if learner.exit_code is None:
                self.store.end_learner(job.id, learner.rank, learner.attempt, -1, time.time())

    def kill_unrecorded(self, job_dir: JobDir) -> None:
        """A collector started just before a crash may have no row yet; its pid file names it."""
        if not job_dir.status.is_dir():
            return
        for pid_file in job_dir.status.glob("*.pid"):
            record = read_json(pid_file) or {}
            if pid_file.with_suffix(".exit").exists():
                continue
            for key in ("learner_pid", "collector_pid"):
                pid = record.get(key)
                if not isinstance(pid, int):
                    continue
                try:
                    proc = psutil.Process(pid)
                    if str(job_dir.root) in " ".join([*proc.cmdline(), proc.cwd()]):
                        proc.kill()
                except (psutil.Error, TypeError, ValueError):
                    continue
