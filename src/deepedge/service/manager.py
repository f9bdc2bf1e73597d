"""The lifecycle manager: one loop that reconciles the store with what actually runs.

Each tick is level-triggered (it looks at the state, not at events it might have missed),
so the same code that runs a healthy job also recovers one after a service crash::

    requests  -> halt / checkpoint asked for through the API
    orphans   -> a DEPLOYING job seen here is a deploy that died with a previous process:
                 learners it started (running or finished) are kept and the missing ranks
                 started (PROCESSING); if none had started, back to PENDING
    disk      -> every disk_poll_s: a tenant over its disk quota has its running jobs
                 stopped FAILED and its queued jobs held
    admit     -> QUEUED -> PENDING while the tenant's quota (jobs, cores, GPUs, disk) allows
    deploy    -> PENDING -> DEPLOYING -> PROCESSING via the guardian, or back to PENDING with
                 backoff, or FAILED after the retry limit
    monitor   -> for each running learner: alive (re-attached after a restart), exited 0,
                 or crashed/lost -> RESTARTED from the newest checkpoint -> PROCESSING;
                 stopped by a limit (memory cgroup, disk quota) -> FAILED;
                 all exited 0 -> STORING -> COMPLETED

Only this loop starts or stops learners, so no job ever has two live attempts of one rank.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from deepedge.core.errors import ConflictError, NotFoundError
from deepedge.core.limits import LimitReached
from deepedge.service.admission import Held, Queued, Quota, admit
from deepedge.service.checkpoints import latest_checkpoint, request_checkpoint, sync_checkpoints
from deepedge.service.companion import Companion
from deepedge.service.config import ServiceSettings
from deepedge.service.disk_quota import tenants_over_quota
from deepedge.service.durable_files import write_atomic
from deepedge.service.guardian import (
    DeployError,
    Deployment,
    GrantApiAccess,
    Guardian,
    LaunchLearners,
    backoff_s,
    launch_rank,
)
from deepedge.service.learner_stops import SERVICE_STOP_EXIT, LearnerStops
from deepedge.service.manifest import JobManifest
from deepedge.service.records import JobId, JobRecord, LearnerRecord
from deepedge.service.recovery_events import RecoveryCounters, RecoveryEvent
from deepedge.service.status import ACTIONS, Action, ErrorCode, JobStatus
from deepedge.service.store import JobStore, manifest_of
from deepedge.service.supervisor import Liveness, Observation, Supervisor, process_start_time
from deepedge.service.tenants import TokenRole
from deepedge.service.workspace import JobDir, Workspace, log_tail

log = logging.getLogger(__name__)

S = JobStatus
LIMIT_ADVICE = {
    LimitReached.MEMORY: "Raise resources.mem_mb, or make the learner hold less (its /tmp "
    "and /dev/shm count too)",
    LimitReached.DISK: "Delete jobs whose files you no longer need, or ask the operator for "
    "a larger max_disk_mb",
}
ADMIT_BATCH = 500  # oldest queued jobs looked at per tick


class Manager:
    def __init__(
        self,
        store: JobStore,
        settings: ServiceSettings,
        supervisor: Supervisor | None = None,
        guardian: Guardian | None = None,
        events_path: Path | None = None,
    ) -> None:
        """``events_path``: where the recovery counters are published for an API that runs
        in another process (a small JSON file, rewritten when a counter changes)."""
        self.store = store
        self.settings = settings
        self.workspace = Workspace(settings.data_dir)
        self.supervisor = supervisor or Supervisor()
        self.stops = LearnerStops(store, self.supervisor)
        if self.supervisor.on_exit is None:
            self.supervisor.on_exit = self.wake
        self.confinement = settings.confinement()
        self.guardian = guardian or Guardian.default(
            self.supervisor, store.add_learner, settings.learner_start_timeout_s,
            api=GrantApiAccess(self._mint_job_token, self._revoke_job_credentials),
        )  # fmt: skip
        self.recovery = RecoveryCounters(events_path)
        self._last_checkpoint_request: dict[str, float] = {}
        self._last_sync: dict[str, float] = {}
        self._seen_alive: set[tuple[str, int, int]] = set()
        self._start_wall = time.time()
        self._saturated: frozenset[str] = frozenset()  # tenants at quota at the last admission
        self._over_disk: frozenset[str] = frozenset()  # tenants over their disk quota
        self._last_disk_poll = float("-inf")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Held around every tick: the control plane submits a job and stages its files
        # under it, so a job is never deployed before its files are there.
        self.tick_lock = threading.Lock()
        self.control: Companion | None = None  # the control plane, attached by the entry point

    # -- loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self.recovery.publish()
        self._thread = threading.Thread(target=self._run, name="deepedge-manager", daemon=True)
        self._thread.start()
        if self.control is not None:
            self.control.start()

    def wake(self) -> None:
        """Run the next tick soon (a job was submitted, a learner ended, a user halted,
        resumed or asked for a checkpoint). Wake-ups coalesce: however many arrive, the
        loop runs one tick, at most one per ``min_tick_gap_s``."""
        self._wake.set()

    def submitted(self, tenant_id: str) -> None:
        """A job was queued: wake the manager unless its tenant was at quota at the last
        admission (then nothing can be admitted until a job of it ends, which wakes the
        manager anyway), so a burst of submissions costs no extra ticks."""
        if tenant_id not in self._saturated:
            self.wake()

    def recovery_events(self) -> dict[str, int]:
        return self.recovery.document()

    def _count(self, event: RecoveryEvent) -> None:
        self.recovery.count(event)

    def stop(self, *, stop_jobs: bool = False) -> list[str]:
        """End the loop (and the control plane beside it). ``stop_jobs``: the service is
        being stopped on purpose (SIGTERM, Ctrl-C), so the learners it started are stopped
        too, each recorded as ended by the stop (:data:`SERVICE_STOP_EXIT`): the next start
        restarts them from their newest checkpoint without spending a restart. Without it
        (a supervisor that is gone: a crash) they run on and the next manager re-attaches.
        Returns the ids of the jobs whose learners were stopped."""
        if self.control is not None:
            self.control.stop()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not stop_jobs:
            return []
        with self.tick_lock:
            jobs = self.store.jobs_in([S.DEPLOYING, S.PROCESSING, S.RESTARTED])
            stopped = self.stops.stop_for_service_stop(jobs, self.job_dir,
                                                       self.settings.halt_grace_s)  # fmt: skip
        for job_id in stopped:
            self._forget(job_id)
        return stopped

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                with self.tick_lock:
                    self.tick()
            except Exception:
                log.exception("manager tick failed")
            # A burst of wake-ups (many submissions) must not turn into back-to-back ticks
            # that compete with the API for the CPU: keep a short gap after every tick.
            self._stop.wait(self.settings.min_tick_gap_s)
            self._wake.wait(max(self.settings.tick_s - (time.monotonic() - started), 0.0))
            self._wake.clear()

    def tick(self) -> None:
        for stage in (
            self._apply_requests,
            self._roll_back_orphans,
            self._enforce_disk_quotas,
            self._admit,
            self._deploy,
            self._monitor,
        ):
            stage()

    def _each(self, jobs: list[JobRecord], handler: Callable[[JobRecord], None]) -> None:
        for job in jobs:
            try:
                handler(job)
            except (ConflictError, NotFoundError) as exc:
                log.info("job %s changed under the manager (%s); next tick", job.id, exc)
            except Exception:
                log.exception("manager failed on job %s", job.id)

    def job_dir(self, job: JobRecord) -> JobDir:
        return self.workspace.job_dir(job.tenant_id, job.id)

    def _deployment(self, job: JobRecord, manifest: JobManifest, resume: Path | None) -> Deployment:
        return Deployment(
            job, manifest, self.job_dir(job), self._next_attempt(job), resume,
            ray_address=self.settings.ray_address, learners_on_ray=self.settings.learners_on_ray,
            tenant=self.store.tenant(job.tenant_id), confinement=self.confinement,
            data_dir=self.settings.data_dir,
        )  # fmt: skip

    def _mint_job_token(self, job: JobRecord) -> str:
        _, secret = self.store.tenancy.create_token(
            TokenRole.JOB, tenant_id=job.tenant_id, label=f"job {job.id}", job_id=job.id
        )
        return secret

    def _revoke_job_credentials(self, job: JobRecord) -> None:
        self.store.tenancy.revoke_job_credentials(job.id)

    # -- requests -------------------------------------------------------------------------

    def _apply_requests(self) -> None:
        self._each(self.store.jobs_with_requests(), self._apply_request)

    def _apply_request(self, job: JobRecord) -> None:
        if job.requested_action is None:
            return
        action = Action(job.requested_action)
        if action is Action.CHECKPOINT and job.status in ACTIONS[Action.CHECKPOINT]:
            request_checkpoint(self.job_dir(job))
            self._last_checkpoint_request[job.id] = time.monotonic()
        elif action is Action.HALT and job.status in {S.QUEUED, S.PENDING}:
            self.store.transition(job.id, S.HALTED, "halted by the user", expected=job.status)
        elif action is Action.HALT and job.status in {S.PROCESSING, S.RESTARTED, S.DEPLOYING}:
            self._stop_learners(job)
            self.store.transition(
                job.id, S.HALTED, "halted by the user; learners stopped", expected=job.status
            )
        elif action is Action.HALT and job.status is S.STORING:
            return  # let it finish storing; the request stays until it is terminal
        self.store.clear_request(job.id, action.value)

    # -- deploy ---------------------------------------------------------------------------

    def _roll_back_orphans(self) -> None:
        self._each(self.store.jobs_in([S.DEPLOYING]), self._recover_deploy)

    def _recover_deploy(self, job: JobRecord) -> None:
        """A DEPLOYING job here is a deploy that died with a previous manager. Nothing of it
        started: back to PENDING. Some of its learners started (running, or even finished):
        they are kept -- a learner never runs twice -- and the ranks not started yet are
        started now (the deploy is finished rather than rolled back)."""
        manifest = manifest_of(job)
        job_dir = self.job_dir(job)
        recorded = self.store.learners(job.id)
        attempt = max((lr.attempt for lr in recorded), default=None)
        current = {lr.rank: lr for lr in recorded if lr.attempt == attempt}
        seen = {rank: self.supervisor.observe(job_dir, lr) for rank, lr in current.items()}
        for rank, observation in seen.items():
            if observation.pid is not None:  # recorded before its collector started
                self._adopt(current[rank], observation.pid)
        started = {rank for rank, o in seen.items() if o.started}
        if not started:
            self._stop_learners(job)
            self._count(RecoveryEvent.DEPLOY_ROLLED_BACK)
            self.store.transition(
                job.id, S.PENDING,
                "deployment interrupted by a service restart before any learner started; "
                "redeploying", expected=S.DEPLOYING,
            )  # fmt: skip
            return
        assert attempt is not None
        missing = [r for r in range(manifest.learners) if r not in started]
        if missing:
            deployment = self._deployment(job, manifest, latest_checkpoint(job_dir))
            deployment.attempt = attempt
            self._prepare(deployment)
            for rank in missing:
                launch_rank(self.supervisor, deployment, rank, self.store.add_learner)
        self._count(RecoveryEvent.DEPLOY_ADOPTED)
        self.store.transition(
            job.id, S.PROCESSING,
            f"deployment interrupted by a service restart: {len(started)} learner(s) found "
            f"started and kept, {len(missing)} started now", expected=S.DEPLOYING,
        )  # fmt: skip

    def _adopt(self, learner: LearnerRecord, pid: int) -> None:
        started = process_start_time(pid) or time.time()
        self.store.add_learner(dataclasses.replace(learner, pid=pid, pid_started_at=started))

    def _enforce_disk_quotas(self) -> None:
        """Count the folders of every tenant with running or queued jobs (each
        ``disk_poll_s``); stop the running jobs of a tenant over its disk quota, without
        grace, FAILED with the reason."""
        now = time.monotonic()
        if now - self._last_disk_poll < self.settings.disk_poll_s:
            return
        self._last_disk_poll = now
        running = self.store.jobs_in([S.PROCESSING, S.RESTARTED])
        ids = {j.tenant_id for j in running} | set(self.store.tenants_with_queued_jobs())
        over = tenants_over_quota(self.settings.data_dir, [self.store.tenant(t) for t in ids])
        self._over_disk = frozenset(over)

        def fail(job: JobRecord) -> None:
            self._stop_learners(job, grace_s=0.0)
            self.store.transition(
                job.id, S.FAILED,
                f"{over[job.tenant_id]}; learners stopped. {LIMIT_ADVICE[LimitReached.DISK]}",
                expected=job.status, error_code=ErrorCode.DISK_QUOTA,
            )  # fmt: skip

        self._each([j for j in running if j.tenant_id in over], fail)

    def _admit(self) -> None:
        """FIFO per tenant: admit the oldest queued jobs while the tenant's quota allows
        (:func:`deepedge.service.admission.admit`)."""
        tenants = self.store.tenants_with_queued_jobs()
        pending = collections.Counter(j.tenant_id for j in self.store.jobs_in([S.PENDING]))
        saturated: set[str] = set()
        for tenant_id in tenants:
            try:
                if tenant_id in self._over_disk:  # until it frees space
                    saturated.add(tenant_id)
                    continue
                tenant = self.store.tenant(tenant_id)
                count, job_cores, job_gpus = self.store.usage(tenant_id)
                serving = self.control.serving_cores(tenant_id) if self.control else (0.0, 0.0)
                held = Held(count + pending[tenant_id], job_cores + serving[0],
                            job_gpus + serving[1])  # fmt: skip
                free = tenant.max_active_jobs - held.jobs
                jobs = self.store.queued_for(tenant_id, min(free, ADMIT_BATCH)) if free > 0 else []
                verdict = admit(
                    held, Quota(tenant.max_active_jobs, tenant.max_cores, tenant.max_gpus),
                    [Queued(j.id, (m := manifest_of(j)).cores, m.gpus) for j in jobs],
                )  # fmt: skip
                for job_id in verdict.admitted:
                    self.store.transition(JobId(job_id), S.PENDING,
                                          "admitted within the tenant's quota",
                                          expected=S.QUEUED)  # fmt: skip
                if verdict.saturated or free <= 0:
                    saturated.add(tenant_id)
            except (ConflictError, NotFoundError):
                continue
        self._saturated = frozenset(saturated)

    def _deploy(self) -> None:
        now = time.time()
        ready = [j for j in self.store.jobs_in([S.PENDING]) if j.next_attempt_at <= now]
        self._each(ready, self._deploy_one)

    def _next_attempt(self, job: JobRecord) -> int:
        return max((lr.attempt for lr in self.store.learners(job.id)), default=-1) + 1

    def _deploy_one(self, job: JobRecord) -> None:
        manifest = manifest_of(job)
        job_dir = self.job_dir(job)
        number = job.deploy_attempts + 1
        job = self.store.transition(
            job.id, S.DEPLOYING, f"deploy attempt {number}", expected=S.PENDING
        )
        deployment = self._deployment(job, manifest, latest_checkpoint(job_dir))
        try:
            self.guardian.deploy(deployment)
        except DeployError as exc:
            self._deploy_failed(job, manifest, number, exc)
            return
        resume = f" from checkpoint {deployment.resume_from.name}" if deployment.resume_from else ""
        self.store.transition(
            job.id,
            S.PROCESSING,
            f"{manifest.learners} learner(s) running{resume}",
            expected=S.DEPLOYING,
        )
        self._last_checkpoint_request[job.id] = time.monotonic()

    def _deploy_failed(
        self, job: JobRecord, manifest: JobManifest, number: int, exc: DeployError
    ) -> None:
        self.stops.record_ended(job)
        if exc.retryable and number <= manifest.retry_limit:
            delay = backoff_s(number, self.settings.backoff_base_s, self.settings.backoff_cap_s)
            self.store.transition(
                job.id,
                S.PENDING,
                f"deploy attempt {number} failed, rolled back: {exc.message}; retry in {delay:g}s",
                expected=S.DEPLOYING,
                deploy_attempts=number,
                next_attempt_at=time.time() + delay,
            )
            return
        code = ErrorCode.DEPLOY_FAILED if exc.retryable else ErrorCode.KIND_UNAVAILABLE
        advice = (
            "fix the manifest and submit it again"
            if not exc.retryable
            else "check that the command exists and the resources suffice, then resubmit"
        )
        self.store.transition(
            job.id,
            S.FAILED,
            f"deploy failed after {number} attempt(s), rolled back: {exc.message}; {advice}",
            expected=S.DEPLOYING,
            error_code=code,
            deploy_attempts=number,
        )

    # -- monitor --------------------------------------------------------------------------

    def _monitor(self) -> None:
        self._each(self.store.jobs_in([S.PROCESSING, S.RESTARTED, S.STORING]), self._watch)

    def _latest_learners(self, job: JobRecord) -> dict[int, LearnerRecord]:
        latest: dict[int, LearnerRecord] = {}
        for learner in self.store.learners(job.id):
            if learner.rank not in latest or learner.attempt > latest[learner.rank].attempt:
                latest[learner.rank] = learner
        return latest

    def _watch(self, job: JobRecord) -> None:
        if job.status is S.STORING:
            self._store_results(job)
            return
        manifest = manifest_of(job)
        job_dir = self.job_dir(job)
        latest = self._latest_learners(job)
        done: list[int] = []
        for rank in range(manifest.learners):
            learner = latest.get(rank)
            seen = (
                self.supervisor.observe(job_dir, learner)
                if learner is not None
                else Observation(Liveness.LOST, detail="learner never recorded")
            )
            if seen.liveness is Liveness.RUNNING:
                assert learner is not None
                if seen.pid is not None:
                    self._adopt(learner, seen.pid)
                key = (job.id, rank, learner.attempt)
                if key not in self._seen_alive:
                    self._seen_alive.add(key)
                    if learner.started_at < self._start_wall:
                        self._count(RecoveryEvent.REATTACHED)
                continue
            if learner is not None and learner.exit_code == SERVICE_STOP_EXIT:
                job = self._restart_or_fail(job, manifest, job_dir, rank, seen, by_stop=True)
                continue
            if learner is not None and learner.exit_code is None:
                self.store.end_learner(
                    job.id,
                    rank,
                    learner.attempt,
                    seen.exit_code if seen.exit_code is not None else -1,
                    time.time(),
                )
            if seen.liveness is Liveness.EXITED and seen.exit_code == 0:
                done.append(rank)
                continue
            job = self._restart_or_fail(job, manifest, job_dir, rank, seen)
            if job.status is S.FAILED:
                return
        if job.status is S.RESTARTED:
            job = self.store.transition(
                job.id, S.PROCESSING, "all learners running again", expected=S.RESTARTED
            )
        if len(done) == manifest.learners:
            sync_checkpoints(self.store, job.id, job_dir, manifest.checkpoint_retention)
            job = self.store.transition(
                job.id, S.STORING, "all learners exited 0; storing results", expected=job.status
            )
            self._store_results(job)
            return
        self._housekeeping(job, manifest, job_dir)

    def _restart_or_fail(
        self,
        job: JobRecord,
        manifest: JobManifest,
        job_dir: JobDir,
        rank: int,
        seen: Observation,
        *,
        by_stop: bool = False,
    ) -> JobRecord:
        """A learner that ended without success: restarted from the newest checkpoint, or
        the job FAILED (a limit reached, restarts spent). ``by_stop``: the service's stop
        ended it, which neither fails the job nor spends a restart."""
        cause = f"learner {rank}: {seen.describe()}"
        if by_stop:
            cause = f"learner {rank}: stopped with the service"
        if seen.limit is not None:  # a restart would meet the same limit
            self._stop_learners(job)
            code = ErrorCode.MEMORY_LIMIT if seen.limit is LimitReached.MEMORY else (
                ErrorCode.DISK_QUOTA
            )  # fmt: skip
            return self.store.transition(
                job.id, S.FAILED,
                f"{cause}; learners stopped. Read the log with `deepedge jobs "
                f"logs {job.id}`. {LIMIT_ADVICE[seen.limit]}",
                expected=job.status, error_code=code,
            )  # fmt: skip
        if job.restarts >= manifest.restart_limit and not by_stop:
            self._stop_learners(job)
            tail = log_tail(job_dir.log_file(rank))
            return self.store.transition(
                job.id,
                S.FAILED,
                f"{cause}; restart limit {manifest.restart_limit} reached. Last log lines: "
                f"{tail or '(none)'}. Read the full log with `deepedge jobs logs {job.id}`, fix "
                "the learner and resubmit (or raise restart_limit)",
                expected=job.status,
                error_code=(
                    ErrorCode.RESTARTS_EXHAUSTED
                    if manifest.restart_limit
                    else ErrorCode.LEARNER_FAILED
                ),
            )
        checkpoint = latest_checkpoint(job_dir)
        origin = f"checkpoint {checkpoint.name}" if checkpoint else "the start (no checkpoint yet)"
        if job.status is not S.RESTARTED:
            job = self.store.transition(
                job.id,
                S.RESTARTED,
                f"{cause}; restarting it from {origin}",
                expected=job.status,
                restarts=job.restarts + (0 if by_stop else 1),
            )
        elif not by_stop:
            self.store.update_fields(job.id, restarts=job.restarts + 1)
            job = self.store.get(job.id)
        deployment = self._deployment(job, manifest, checkpoint)
        self._prepare(deployment)
        launch_rank(self.supervisor, deployment, rank, self.store.add_learner)
        self._count(RecoveryEvent.LEARNER_RESTARTED)
        return job

    def _prepare(self, deployment: Deployment) -> None:
        """The steps before a launch, outside a full deployment (a restarted rank, a
        deployment finished after a restart): all of them may run again."""
        for step in self.guardian.steps:
            if not isinstance(step, LaunchLearners):
                step.apply(deployment)

    def _housekeeping(self, job: JobRecord, manifest: JobManifest, job_dir: JobDir) -> None:
        now = time.monotonic()
        last = self._last_checkpoint_request.setdefault(job.id, now)
        if now - last >= manifest.checkpoint_interval_s:
            request_checkpoint(job_dir)
            self._last_checkpoint_request[job.id] = now
        if now - self._last_sync.get(job.id, 0.0) >= self.settings.checkpoint_sync_s:
            sync_checkpoints(self.store, job.id, job_dir, manifest.checkpoint_retention)
            self._last_sync[job.id] = now
        if manifest.max_runtime_s is not None:
            first = next(
                (h.at for h in self.store.history(job.id) if h.status is S.PROCESSING), None
            )
            if first is not None and time.time() - first > manifest.max_runtime_s:
                self._stop_learners(job)
                self.store.transition(
                    job.id,
                    S.FAILED,
                    f"ran longer than max_runtime_s={manifest.max_runtime_s:g}; learners stopped. "
                    "Raise max_runtime_s or checkpoint and resume",
                    expected=job.status,
                    error_code=ErrorCode.LEARNER_FAILED,
                )

    def _store_results(self, job: JobRecord) -> None:
        job_dir = self.job_dir(job)
        learners = self.store.learners(job.id)
        write_atomic(
            job_dir.summary_file,
            {
                "job_id": job.id,
                "learners": [
                    {"rank": lr.rank, "attempt": lr.attempt, "exit_code": lr.exit_code}
                    for lr in learners
                ],
                "restarts": job.restarts,
                "checkpoints": [c.name for c in self.store.checkpoints(job.id)],
                "stored_at": time.time(),
            },
        )
        job_dir.checkpoint_request.unlink(missing_ok=True)
        self.store.transition(job.id, S.COMPLETED, "results stored", expected=S.STORING)
        self._forget(job.id)

    # -- stopping -------------------------------------------------------------------------

    def _stop_learners(
        self, job: JobRecord, grace_s: float | None = None, ended_code: int = -1
    ) -> None:
        """Stop every attempt of the job that may still run (:meth:`LearnerStops.stop`)."""
        grace = self.settings.halt_grace_s if grace_s is None else grace_s
        self.stops.stop(job, self.job_dir(job), grace, ended_code)
        self._forget(job.id)

    def _forget(self, job_id: str) -> None:
        self._last_checkpoint_request.pop(job_id, None)
        self._last_sync.pop(job_id, None)
        self._seen_alive = {k for k in self._seen_alive if k[0] != job_id}
