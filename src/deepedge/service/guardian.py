"""The guardian deploys one job all-or-nothing and rolls back what it started on failure.

A deployment is an ordered list of steps, each with ``apply`` and ``rollback``::

    prepare workspace -> stage data -> write learner spec -> grant API access
        -> launch learners (rank 0..n-1)

If step k fails, steps k, k-1, ..., 0 are rolled back in that order, so nothing of a failed
attempt keeps running. The manager then retries with exponential backoff,
``delay(a) = min(base_s * 2**(a-1), cap_s)`` after failed attempt a, until the manifest's
``retry_limit`` is used up, and then marks the job FAILED with the step and the cause.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from deepedge.core.errors import DeepEdgeError, InvalidInputError
from deepedge.core.limits import LearnerLimits
from deepedge.core.sandbox import SandboxSpec
from deepedge.service.disk_quota import DiskBudget
from deepedge.service.learner import kind_unavailable_reason, learner_argv
from deepedge.service.manifest import CommandSpec, JobKind, JobManifest
from deepedge.service.records import JobRecord, LearnerRecord, Tenant
from deepedge.service.sandbox import TRUSTED, Confinement, give_to_tenant
from deepedge.service.supervisor import Supervisor
from deepedge.service.workspace import JobDir

log = logging.getLogger(__name__)

DATA_FILE = ".deepedge-data.json"
DOCUMENT_FILE = ".deepedge-document.json"


def backoff_s(failed_attempt: int, base_s: float, cap_s: float = 30.0) -> float:
    return float(min(base_s * 2 ** max(failed_attempt - 1, 0), cap_s))


MAX_DRIVER_MEM_MB = 1_048_576  # no address-space cap worth the name on a Ray task's driver
DRIVER_OPEN_FILES = 1024  # the driver's own, whatever the learner's limit


@dataclass
class Deployment:
    """What one deploy attempt is building; steps fill in ``learners`` as they launch.

    ``confinement`` says how the tenant's code runs (sandboxed by default in the service;
    trusted, as the service, when built without one); ``tenant`` is whose code it is."""

    job: JobRecord
    manifest: JobManifest
    job_dir: JobDir
    attempt: int
    resume_from: Path | None
    learners: list[LearnerRecord] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)
    cwd: Path | None = None
    data_path: str = ""
    ray_address: str | None = None  # the service's ray_address: learners connect there
    learners_on_ray: bool = False  # each learner runs as a Ray task there (ray_learner)
    tenant: Tenant | None = None
    confinement: Confinement = TRUSTED
    api_token: str | None = None  # the job's own API token (manifest.api_access)
    data_dir: Path | None = None  # the service's data folder: the tenant's disk quota holds

    @property
    def on_ray(self) -> bool:
        return bool(self.learners_on_ray and self.ray_address)

    def launch_argv(self, rank: int = 0) -> list[str]:
        """The collector's command: the learner itself, or its Ray task's driver (which
        reads the learner's environment from its file and sandboxes it on the node)."""
        if not self.on_ray:
            return list(self.argv)
        r = self.manifest.resources
        sandbox = self.sandbox()
        assert self.ray_address is not None
        return [
            sys.executable, "-m", "deepedge.runtime.cluster.ray_learner",
            "--address", self.ray_address, "--cpus", json.dumps(r.cpus), "--gpus", str(r.gpus),
            *(["--node", r.node] if r.node else []), *self.limits().argv(),
            "--env-file", str(self.job_dir.env_file(rank, self.attempt)),
            "--cwd", str(self.cwd or self.job_dir.work),
            *(["--sandbox", sandbox.to_json()] if sandbox is not None else []),
            "--", *self.argv,
        ]  # fmt: skip

    def limits(self) -> LearnerLimits:
        """The learner's limits (the manifest's resources)."""
        r = self.manifest.resources
        max_file_mb = r.max_file_mb
        if self.tenant is not None and self.data_dir is not None:  # no file past the quota
            max_file_mb = min(max_file_mb, self.tenant.max_disk_mb)
        return LearnerLimits(
            mem_mb=r.mem_mb, cpu_time_s=r.cpu_time_s, nofile=r.max_open_files, nice=r.nice,
            max_processes=r.max_processes if self.confinement.sandboxed else None,
            max_file_mb=max_file_mb,
        )  # fmt: skip

    def disk_budget(self) -> DiskBudget | None:
        """What the job's folder may still grow by within its tenant's disk quota (None:
        no quota, a deployment outside the service)."""
        if self.tenant is None or self.data_dir is None:
            return None
        return DiskBudget.measure(self.tenant.name, self.tenant.id, self.data_dir,
                                  self.job_dir.root, self.tenant.max_disk_mb)  # fmt: skip

    def launch_limits(self) -> LearnerLimits:
        """The collector's child's limits. On Ray they hold for the learner on its node (the
        driver passes them to the task), not for the local driver: an address-space cap
        there would be smaller than Ray's own mappings, a CPU-time cap or nice would slow or
        end the driver instead of the learner."""
        if not self.on_ray:
            return self.limits()
        return LearnerLimits(mem_mb=MAX_DRIVER_MEM_MB, nofile=DRIVER_OPEN_FILES)

    def sandbox(self) -> SandboxSpec | None:
        """The learner's sandbox (None: trusted tenants): its job's folders writable, the
        API's socket when the job asked for the API; its ``/tmp`` and ``/dev/shm`` no larger
        than its memory (their pages are charged to its memory cgroup too)."""
        if not self.confinement.sandboxed:
            return None
        assert self.tenant is not None, "a sandboxed deployment knows its tenant"
        r = self.manifest.resources
        folders = self.job_dir.tenant_writable()
        return self.confinement.spec(
            self.tenant, cwd=self.cwd or self.job_dir.work, writable=folders,
            api=self.manifest.api_access, gpus=r.gpus > 0, tmp_mb=min(r.tmp_mb, r.mem_mb),
        )  # fmt: skip

    def env(self, rank: int) -> dict[str, str]:
        """The learner's whole environment: the job's variables and the manifest's ``env``
        (in a sandbox nothing else; trusted, over the service's own)."""
        extra: dict[str, str] = {}
        if isinstance(self.manifest.spec, CommandSpec):
            extra.update(self.manifest.spec.env)
        extra.update(
            DEEPEDGE_JOB_ID=self.job.id,
            DEEPEDGE_JOB_NAME=self.job.name,
            DEEPEDGE_LEARNER_RANK=str(rank),
            DEEPEDGE_LEARNERS=str(self.manifest.learners),
            DEEPEDGE_ATTEMPT=str(self.attempt),
            DEEPEDGE_DATA=self.data_path,
            DEEPEDGE_CHECKPOINT_DIR=str(self.job_dir.checkpoints),
            DEEPEDGE_CHECKPOINT_REQUEST=str(self.job_dir.checkpoint_request),
            DEEPEDGE_CHECKPOINT_INTERVAL_S=str(self.manifest.checkpoint_interval_s),
            DEEPEDGE_METRICS_FILE=str(self.job_dir.metrics_file),
            DEEPEDGE_RESULTS_DIR=str(self.job_dir.results),
        )
        if self.resume_from is not None:
            extra["DEEPEDGE_RESUME_FROM"] = str(self.resume_from)
        if self.api_token is not None:
            extra["DEEPEDGE_TOKEN"] = self.api_token
            extra["DEEPEDGE_URL"] = self.confinement.api_url()
        # A sandboxed learner cannot reach the cluster (no network): a model update that
        # uses Ray starts its own inside the sandbox.
        if self.ray_address is not None and not self.confinement.sandboxed:
            extra["RAY_ADDRESS"] = self.ray_address
        if self.manifest.resources.gpus == 0:
            extra["CUDA_VISIBLE_DEVICES"] = ""
        return self.confinement.env(extra)


class DeployError(DeepEdgeError):
    """A deploy step failed; ``retryable`` False means retrying cannot help."""

    def __init__(self, step: str, cause: str, retryable: bool) -> None:
        super().__init__(f"step '{step}' failed: {cause}", step=step)
        self.step = step
        self.cause = cause
        self.retryable = retryable


class DeployStep(Protocol):
    @property
    def name(self) -> str: ...

    def apply(self, deployment: Deployment) -> None: ...

    def rollback(self, deployment: Deployment) -> None: ...


@dataclass(frozen=True)
class PrepareWorkspace:
    name: str = "prepare workspace"

    def apply(self, deployment: Deployment) -> None:
        deployment.job_dir.create()
        if deployment.confinement.sandboxed and deployment.tenant is not None:
            give_to_tenant(deployment.tenant, deployment.job_dir.tenant_writable())

    def rollback(self, deployment: Deployment) -> None:
        deployment.job_dir.checkpoint_request.unlink(missing_ok=True)


@dataclass(frozen=True)
class StageData:
    """Resolve the data source; a path must exist inside the job's work directory."""

    name: str = "stage data"

    def apply(self, deployment: Deployment) -> None:
        source = deployment.manifest.data.source
        if source.startswith("builtin:"):
            deployment.data_path = source
        else:
            path = deployment.job_dir.resolve_inside(source)
            if not path.exists():
                raise InvalidInputError(
                    f"data.source {source!r} does not exist in the job's work directory",
                    field="data.source",
                )
            deployment.data_path = str(path)
        (deployment.job_dir.work / DATA_FILE).write_text(
            json.dumps({"source": deployment.data_path})
        )

    def rollback(self, deployment: Deployment) -> None:
        (deployment.job_dir.work / DATA_FILE).unlink(missing_ok=True)


@dataclass(frozen=True)
class WriteLearnerSpec:
    """Decide the learner command; kinds whose engine is missing are not retried."""

    name: str = "write learner spec"

    def apply(self, deployment: Deployment) -> None:
        manifest, job_dir = deployment.manifest, deployment.job_dir
        if isinstance(manifest.spec, CommandSpec):
            deployment.cwd = job_dir.resolve_inside(manifest.spec.cwd)
            deployment.cwd.mkdir(parents=True, exist_ok=True)
            deployment.argv = list(manifest.spec.argv)
            return
        reason = kind_unavailable_reason(manifest.kind)
        if reason is not None:
            raise InvalidInputError(reason, field="kind")
        document = job_dir.work / DOCUMENT_FILE
        document.write_text(json.dumps(manifest.spec.document))
        deployment.cwd = job_dir.work
        deployment.argv = learner_argv(JobKind(manifest.kind), document, job_dir.results)

    def rollback(self, deployment: Deployment) -> None:
        (deployment.job_dir.work / DOCUMENT_FILE).unlink(missing_ok=True)


@dataclass(frozen=True)
class GrantApiAccess:
    """A job that asked for the API (``api_access``) gets a token of its own for this
    attempt; the store revokes it when the job ends, the rollback at once."""

    mint: Callable[[JobRecord], str] | None = None
    revoke: Callable[[JobRecord], None] | None = None
    name: str = "grant API access"

    def apply(self, deployment: Deployment) -> None:
        if deployment.manifest.api_access and self.mint is not None:
            deployment.api_token = self.mint(deployment.job)

    def rollback(self, deployment: Deployment) -> None:
        if deployment.api_token is not None and self.revoke is not None:
            self.revoke(deployment.job)
        deployment.api_token = None


@dataclass(frozen=True)
class LaunchLearners:
    """Start every learner; all must have started before the job counts as deployed (one
    that already finished has: a fast learner is not a failed start)."""

    supervisor: Supervisor
    record: Callable[[LearnerRecord], None]
    start_timeout_s: float = 10.0
    name: str = "launch learners"

    def apply(self, deployment: Deployment) -> None:
        assert deployment.cwd is not None, "WriteLearnerSpec runs first"
        for rank in range(deployment.manifest.learners):
            learner = launch_rank(self.supervisor, deployment, rank, self.record)
            deployment.learners.append(learner)
            seen = self.supervisor.wait_started(deployment.job_dir, learner, self.start_timeout_s)
            if not seen.started:
                raise RuntimeError(f"learner {rank}: {seen.describe()}")

    def rollback(self, deployment: Deployment) -> None:
        for learner in reversed(deployment.learners):
            self.supervisor.stop(deployment.job_dir, learner, grace_s=1.0)
        deployment.learners.clear()


def launch_rank(
    supervisor: Supervisor,
    deployment: Deployment,
    rank: int,
    record: Callable[[LearnerRecord], None],
) -> LearnerRecord:
    """Start one rank's learner of ``deployment`` (its collector), recorded (``record``)
    before it starts and again with its collector's pid."""
    assert deployment.cwd is not None
    record(LearnerRecord(deployment.job.id, rank, deployment.attempt, 0, 0.0, time.time()))
    learner = supervisor.launch(
        deployment.job.id, deployment.job_dir, rank, deployment.attempt,
        deployment.launch_argv(rank), deployment.cwd, deployment.env(rank),
        deployment.launch_limits(), None if deployment.on_ray else deployment.sandbox(),
        env_to_child=not deployment.on_ray, disk=deployment.disk_budget(),
    )  # fmt: skip
    record(learner)
    return learner


class Guardian:
    """Runs a deployment's steps in order; on any failure rolls back everything applied."""

    def __init__(self, steps: Sequence[DeployStep]) -> None:
        self.steps = list(steps)

    @classmethod
    def default(
        cls,
        supervisor: Supervisor,
        record: Callable[[LearnerRecord], None],
        start_timeout_s: float = 10.0,
        api: GrantApiAccess | None = None,
    ) -> Guardian:
        """The standard steps; ``record`` persists each learner as soon as it is started,
        ``api`` mints the tokens of jobs that asked for the API."""
        launch = LaunchLearners(supervisor, record, start_timeout_s)
        grant = api or GrantApiAccess()
        return cls([PrepareWorkspace(), StageData(), WriteLearnerSpec(), grant, launch])

    def deploy(self, deployment: Deployment) -> None:
        applied: list[DeployStep] = []
        for step in self.steps:
            applied.append(step)
            try:
                step.apply(deployment)
            except Exception as exc:
                for done in reversed(applied):
                    try:
                        done.rollback(deployment)
                    except Exception:
                        log.exception(
                            "rollback of %r failed for job %s", done.name, deployment.job.id
                        )
                retryable = not isinstance(exc, InvalidInputError)
                cause = exc.message if isinstance(exc, DeepEdgeError) else str(exc) or repr(exc)
                raise DeployError(step.name, cause, retryable) from exc
