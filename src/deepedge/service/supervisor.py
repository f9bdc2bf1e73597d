"""Start, observe and stop learner attempts through their collectors.

A learner attempt is identified by (job, rank, attempt). The supervisor starts its collector
in a new session, so killing the service (even with SIGKILL) leaves learners and collectors
running; what the service needs to find them again is in the store (collector pid and its
start time, which guards against pid reuse) and in the job directory (pid and exit files).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from deepedge.service.durable_files import read_json
from deepedge.service.manifest import Resources
from deepedge.service.records import JobId, LearnerRecord
from deepedge.service.workspace import JobDir

log = logging.getLogger(__name__)


class Liveness(enum.StrEnum):
    RUNNING = "RUNNING"
    EXITED = "EXITED"  # ended and its collector recorded the exit status
    LOST = "LOST"  # gone without an exit record (collector killed, machine rebooted)


@dataclass(frozen=True)
class Observation:
    liveness: Liveness
    exit_code: int | None = None
    signal: int | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.liveness is Liveness.LOST:
            return "learner process lost without an exit status (its collector died too)"
        if self.detail:
            return self.detail
        if self.signal:
            name = signal.Signals(self.signal).name if self.signal in signal.valid_signals() else ""
            return f"learner killed by signal {self.signal} {name}".rstrip()
        return f"learner exited with code {self.exit_code}"


def _process_start_time(pid: int) -> float | None:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class Supervisor:
    """Owns the Popen handles of collectors it started (to reap them) and nothing else."""

    def __init__(self, on_exit: Callable[[], None] | None = None) -> None:
        """``on_exit`` is called (from a watcher thread) whenever a collector we started
        ends, so the manager reacts to a learner's exit at once instead of at its next tick."""
        self._children: dict[tuple[str, int, int], subprocess.Popen[bytes]] = {}
        self.on_exit = on_exit

    def launch(
        self,
        job_id: JobId,
        job_dir: JobDir,
        rank: int,
        attempt: int,
        argv: list[str],
        cwd: Path,
        env: Mapping[str, str],
        resources: Resources,
    ) -> LearnerRecord:
        """Start the collector for one attempt; the learner itself starts inside it."""
        job_dir.exit_file(rank, attempt).unlink(missing_ok=True)
        job_dir.pid_file(rank, attempt).unlink(missing_ok=True)
        command = [
            sys.executable, "-m", "deepedge.service.collector",
            "--log", str(job_dir.log_file(rank)),
            "--pid-file", str(job_dir.pid_file(rank, attempt)),
            "--exit-file", str(job_dir.exit_file(rank, attempt)),
            "--cwd", str(cwd),
            "--attempt", str(attempt),
            "--mem-mb", str(resources.mem_mb),
            "--nofile", str(resources.max_open_files),
        ]  # fmt: skip
        if resources.cpu_time_s is not None:
            command += ["--cpu-time-s", str(resources.cpu_time_s)]
        if resources.nice:
            command += ["--nice", str(resources.nice)]
        proc = subprocess.Popen(
            [*command, "--", *argv],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self._children[(job_id, rank, attempt)] = proc
        if self.on_exit is not None:
            threading.Thread(
                target=self._watch_exit, args=(proc, self.on_exit), daemon=True,
                name=f"collector-{proc.pid}",
            ).start()  # fmt: skip
        started = _process_start_time(proc.pid) or time.time()
        return LearnerRecord(
            job_id=job_id, rank=rank, attempt=attempt, pid=proc.pid,
            pid_started_at=started, started_at=time.time(),
        )  # fmt: skip

    @staticmethod
    def _watch_exit(proc: subprocess.Popen[bytes], on_exit: Callable[[], None]) -> None:
        proc.wait()
        on_exit()

    def reap(self) -> None:
        """Collect exited collectors we started so that none lingers as a zombie."""
        for key, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[key]

    def observe(self, job_dir: JobDir, learner: LearnerRecord) -> Observation:
        self.reap()
        record = read_json(job_dir.exit_file(learner.rank, learner.attempt))
        if record is not None:
            return Observation(
                Liveness.EXITED,
                exit_code=int(record.get("exit_code", 1)),
                signal=record.get("signal"),
                detail=record.get("spawn_error") or "",
            )
        if self.is_alive(learner):
            return Observation(Liveness.RUNNING)
        # The collector may have written the exit file between the two checks.
        record = read_json(job_dir.exit_file(learner.rank, learner.attempt))
        if record is not None:
            return self.observe(job_dir, learner)
        return Observation(Liveness.LOST)

    @staticmethod
    def is_alive(learner: LearnerRecord) -> bool:
        started = _process_start_time(learner.pid)
        return started is not None and abs(started - learner.pid_started_at) < 1.0

    def learner_pid(self, job_dir: JobDir, learner: LearnerRecord) -> int | None:
        record = read_json(job_dir.pid_file(learner.rank, learner.attempt))
        return int(record["learner_pid"]) if record and "learner_pid" in record else None

    def wait_started(
        self, job_dir: JobDir, learner: LearnerRecord, timeout_s: float
    ) -> Observation:
        """Wait until the collector has started the learner (pid file) or recorded a failure."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if job_dir.pid_file(learner.rank, learner.attempt).exists():
                return Observation(Liveness.RUNNING)
            seen = self.observe(job_dir, learner)
            if seen.liveness is not Liveness.RUNNING:
                return seen
            time.sleep(0.02)
        return Observation(Liveness.LOST, detail="the learner did not start in time")

    def stop(self, job_dir: JobDir, learner: LearnerRecord, grace_s: float = 3.0) -> None:
        """SIGTERM the collector (it forwards to the learner), then SIGKILL the session."""
        if not self.is_alive(learner):
            self._kill_orphan_learner(job_dir, learner)
            return
        try:
            os.kill(learner.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.is_alive(learner):
            self.reap()
            time.sleep(0.05)
        if self.is_alive(learner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(learner.pid, signal.SIGKILL)
        self._kill_orphan_learner(job_dir, learner)
        self.reap()

    def _kill_orphan_learner(self, job_dir: JobDir, learner: LearnerRecord) -> None:
        """A learner whose collector died keeps its session id; end it too."""
        pid = self.learner_pid(job_dir, learner)
        if pid is None:
            return
        try:
            proc = psutil.Process(pid)
            if proc.create_time() >= learner.pid_started_at - 1.0 and os.getsid(pid) == learner.pid:
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass
