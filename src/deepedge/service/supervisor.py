"""Start, observe and stop learner attempts through their collectors.

A learner attempt is identified by (job, rank, attempt). The supervisor starts its collector
in a new session, so killing the service (even with SIGKILL) leaves learners and collectors
running; what the service needs to find them again is in the store (collector pid and its
start time, which guards against pid reuse; an attempt recorded before its collector
started has pid 0 and is found by its files or by its command line, which names its exit
file) and in the job directory (pid and exit files). The learner's environment reaches it
through a file only the service reads (``status/learner-R-A.env``): the collector itself
runs with an empty one, so no tenant variable (``PYTHONPATH``, ``LD_PRELOAD``) ever acts on
a process of the service.
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

from deepedge.core.limits import LearnerLimits, LimitReached
from deepedge.core.sandbox import SandboxSpec
from deepedge.service import attempt_processes
from deepedge.service.attempt_processes import StoppedProcess
from deepedge.service.disk_quota import DiskBudget
from deepedge.service.durable_files import read_json, write_private
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
    spawn_failed: bool = False  # the collector could not start the learner at all
    pid: int | None = None  # the collector found for a learner recorded before it started
    limit: LimitReached | None = None  # the limit that ended it (its collector's record)
    limit_reason: str = ""  # that limit in words: "memory limit 512 MB reached (...)"

    @property
    def started(self) -> bool:
        """The learner started (it may have finished already): not a failed start."""
        return self.liveness is Liveness.RUNNING or (
            self.liveness is Liveness.EXITED and not self.spawn_failed
        )

    def describe(self) -> str:
        if self.detail:
            return self.detail
        if self.limit_reason:
            return f"learner stopped: {self.limit_reason}"
        if self.liveness is Liveness.LOST:
            return "learner process lost without an exit status (its collector died too)"
        if self.signal:
            name = signal.Signals(self.signal).name if self.signal in signal.valid_signals() else ""
            return f"learner killed by signal {self.signal} {name}".rstrip()
        return f"learner exited with code {self.exit_code}"


def process_start_time(pid: int) -> float | None:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def collector_env() -> dict[str, str]:
    """The collector's own environment: none of the service's variables, none of the
    tenant's (those reach the learner only, through its environment file)."""
    keep = ("PATH", "LANG", "LC_ALL", "TZ")
    return {k: os.environ[k] for k in keep if k in os.environ}


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
        limits: LearnerLimits,
        sandbox: SandboxSpec | None = None,
        *,
        env_to_child: bool = True,
        disk: DiskBudget | None = None,
    ) -> LearnerRecord:
        """Start the collector for one attempt; the learner itself starts inside it (in
        ``sandbox`` when given). ``env`` is the learner's whole environment, written to a
        file only the service can read (:meth:`JobDir.env_file`): the collector reads it
        for its child (``env_to_child``), else its child does (the Ray driver). With
        ``disk``, the collector stops the learner past its tenant's disk quota."""
        for stale in (job_dir.exit_file(rank, attempt), job_dir.pid_file(rank, attempt)):
            stale.unlink(missing_ok=True)
        env_file = job_dir.env_file(rank, attempt)
        write_private(env_file, dict(env))
        command = [
            sys.executable, "-m", "deepedge.service.collector",
            "--log", str(job_dir.log_file(rank)),
            "--pid-file", str(job_dir.pid_file(rank, attempt)),
            "--exit-file", str(job_dir.exit_file(rank, attempt)),
            "--cwd", str(cwd),
            "--attempt", str(attempt),
            *limits.argv(),
        ]  # fmt: skip
        if env_to_child:
            command += ["--env-file", str(env_file)]
        if sandbox is not None:
            command += ["--sandbox", sandbox.to_json()]
        if disk is not None:
            command += disk.argv()
        proc = subprocess.Popen(
            [*command, "--", *argv],
            env=collector_env(),
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
        started = process_start_time(proc.pid) or time.time()
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
        """What the attempt is doing now: the collector's exit record decides; without
        one, the collector's process (found by pid, or for a learner recorded before its
        collector started, by its files and command line)."""
        self.reap()
        exit_path = job_dir.exit_file(learner.rank, learner.attempt)
        for _ in range(2):  # the collector may write the exit file between the checks
            record = read_json(exit_path)
            if record is not None:
                limit = record.get("limit")
                return Observation(
                    Liveness.EXITED,
                    exit_code=int(record.get("exit_code", 1)),
                    signal=record.get("signal"),
                    detail=record.get("spawn_error") or "",
                    spawn_failed=bool(record.get("spawn_error")),
                    limit=LimitReached(limit) if limit in set(LimitReached) else None,
                    limit_reason=str(record.get("limit_reason") or ""),
                )
            if learner.pid and self.is_alive(learner):
                return Observation(Liveness.RUNNING)
            if not learner.pid and (pid := find_collector(job_dir, learner)) is not None:
                return Observation(Liveness.RUNNING, pid=pid)
        return Observation(Liveness.LOST)

    @staticmethod
    def is_alive(learner: LearnerRecord) -> bool:
        started = process_start_time(learner.pid)
        return started is not None and abs(started - learner.pid_started_at) < 1.0

    def learner_pid(self, job_dir: JobDir, learner: LearnerRecord) -> int | None:
        record = read_json(job_dir.pid_file(learner.rank, learner.attempt))
        return int(record["learner_pid"]) if record and "learner_pid" in record else None

    def wait_started(
        self, job_dir: JobDir, learner: LearnerRecord, timeout_s: float
    ) -> Observation:
        """Wait until the collector has started the learner (pid file) or recorded its end
        (a learner that already finished has started; only a spawn error is a failure)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = self.observe(job_dir, learner)
            if seen.liveness is not Liveness.RUNNING:
                return seen
            if job_dir.pid_file(learner.rank, learner.attempt).exists():
                return seen
            time.sleep(0.02)
        return Observation(Liveness.LOST, detail="the learner did not start in time")

    def stop(
        self, job_dir: JobDir, learner: LearnerRecord, grace_s: float = 3.0
    ) -> list[StoppedProcess]:
        """SIGTERM the collector (it forwards to the learner), then SIGKILL its session and
        whatever else of the attempt still runs: every process the collector and the
        learner started, a private Ray's included, as found before the stop
        (:mod:`deepedge.service.attempt_processes`). Returns the attempt's processes that
        ran and are gone."""
        if not learner.pid or not self.is_alive(learner):
            self._kill_orphan_learner(job_dir, learner)
            return []
        before = attempt_processes.snapshot(learner.pid)
        try:
            os.kill(learner.pid, signal.SIGTERM)
        except ProcessLookupError:
            return []
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.is_alive(learner):
            self.reap()
            time.sleep(0.05)
        if self.is_alive(learner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(learner.pid, signal.SIGKILL)
        self._kill_orphan_learner(job_dir, learner)
        stopped = attempt_processes.end(before, learner.pid)
        self.reap()
        return stopped

    def _kill_orphan_learner(self, job_dir: JobDir, learner: LearnerRecord) -> None:
        """A learner whose collector died keeps its session id (the collector's pid); end
        it too."""
        record = read_json(job_dir.pid_file(learner.rank, learner.attempt)) or {}
        pid, session = record.get("learner_pid"), learner.pid or record.get("collector_pid")
        if not isinstance(pid, int) or not isinstance(session, int):
            return
        try:
            proc = psutil.Process(pid)
            if proc.create_time() >= learner.pid_started_at - 1.0 and os.getsid(pid) == session:
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass


def find_collector(job_dir: JobDir, learner: LearnerRecord) -> int | None:
    """The collector of an attempt recorded before it started (``pid`` 0): the one whose
    command line names this attempt's exit file (unique to it), if it runs."""
    marker = str(job_dir.exit_file(learner.rank, learner.attempt))
    record = read_json(job_dir.pid_file(learner.rank, learner.attempt)) or {}
    candidates = [record["collector_pid"]] if isinstance(record.get("collector_pid"), int) else []
    for pid in candidates:
        if _runs_with(pid, marker):
            return int(pid)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "deepedge.service.collector" in cmdline and marker in cmdline:
            return int(proc.info["pid"])
    return None


def _runs_with(pid: int, marker: str) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and marker in proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
