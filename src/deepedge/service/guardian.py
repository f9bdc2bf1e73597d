"""The guardian deploys one job all-or-nothing and rolls back what it started on failure.

A deployment is an ordered list of steps, each with ``apply`` and ``rollback``::

    prepare workspace -> stage data -> write learner spec -> launch learners (rank 0..n-1)

If step k fails, steps k, k-1, ..., 0 are rolled back in that order, so nothing of a failed
attempt keeps running. The manager then retries with exponential backoff,
``delay(a) = min(base_s * 2**(a-1), cap_s)`` after failed attempt a, until the manifest's
``retry_limit`` is used up, and then marks the job FAILED with the step and the cause.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from deepedge.core.errors import DeepEdgeError, InvalidInputError
from deepedge.service.learner import kind_unavailable_reason, learner_argv
from deepedge.service.manifest import CommandSpec, JobKind, JobManifest, Resources
from deepedge.service.records import JobRecord, LearnerRecord
from deepedge.service.supervisor import Liveness, Supervisor
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
    """What one deploy attempt is building; steps fill in ``learners`` as they launch."""

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

    def launch_argv(self) -> list[str]:
        """The collector's command: the learner itself, or its Ray task's driver."""
        if not (self.learners_on_ray and self.ray_address):
            return list(self.argv)
        r = self.manifest.resources
        return [
            sys.executable, "-m", "deepedge.runtime.ray_learner",
            "--address", self.ray_address, "--cpus", json.dumps(r.cpus), "--gpus", str(r.gpus),
            "--mem-mb", str(r.mem_mb), *(["--node", r.node] if r.node else []),
            "--nofile", str(r.max_open_files), "--nice", str(r.nice),
            *(["--cpu-time-s", str(r.cpu_time_s)] if r.cpu_time_s is not None else []),
            "--", *self.argv,
        ]  # fmt: skip

    def launch_resources(self) -> Resources:
        """The collector's limits. On Ray they hold for the learner on its node (the driver
        passes them to the task), not for the local driver: an address-space cap there
        would be smaller than Ray's own mappings, a CPU-time cap or nice would slow or
        end the driver instead of the learner."""
        r = self.manifest.resources
        if not (self.learners_on_ray and self.ray_address):
            return r
        return r.model_copy(
            update={"mem_mb": MAX_DRIVER_MEM_MB, "cpu_time_s": None, "nice": 0,
                    "max_open_files": DRIVER_OPEN_FILES}
        )  # fmt: skip

    def env(self, rank: int) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("DEEPEDGE_")}
        if isinstance(self.manifest.spec, CommandSpec):
            base.update(self.manifest.spec.env)
        base.update(
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
            base["DEEPEDGE_RESUME_FROM"] = str(self.resume_from)
        if self.ray_address is not None:
            base["RAY_ADDRESS"] = self.ray_address
        if self.manifest.resources.gpus == 0:
            base["CUDA_VISIBLE_DEVICES"] = ""
        return base


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
class LaunchLearners:
    """Start every learner; all must be running before the job counts as deployed."""

    supervisor: Supervisor
    record: Callable[[LearnerRecord], None]
    start_timeout_s: float = 10.0
    name: str = "launch learners"

    def apply(self, deployment: Deployment) -> None:
        assert deployment.cwd is not None, "WriteLearnerSpec runs first"
        for rank in range(deployment.manifest.learners):
            learner = self.supervisor.launch(
                deployment.job.id, deployment.job_dir, rank, deployment.attempt,
                deployment.launch_argv(), deployment.cwd, deployment.env(rank),
                deployment.launch_resources(),
            )  # fmt: skip
            deployment.learners.append(learner)
            self.record(learner)
            seen = self.supervisor.wait_started(deployment.job_dir, learner, self.start_timeout_s)
            if seen.liveness is not Liveness.RUNNING:
                raise RuntimeError(f"learner {rank}: {seen.describe()}")

    def rollback(self, deployment: Deployment) -> None:
        for learner in reversed(deployment.learners):
            self.supervisor.stop(deployment.job_dir, learner, grace_s=1.0)
        deployment.learners.clear()


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
    ) -> Guardian:
        """The standard steps; ``record`` persists each learner as soon as it is started."""
        launch = LaunchLearners(supervisor, record, start_timeout_s)
        return cls([PrepareWorkspace(), StageData(), WriteLearnerSpec(), launch])

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
