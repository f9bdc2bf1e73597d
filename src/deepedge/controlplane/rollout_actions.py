"""What an operator asks of a deployment (API and CLI): update now, roll back, stop,
register a model trained elsewhere, or delete it. Each is one committed step with its
decision event (deletion: one transaction that removes it, after its samples), retried
when the control loop changed the deployment meanwhile (compare-and-set)."""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepedge.controlplane import version_steps
from deepedge.controlplane.artifacts import (
    Shapes,
    artifact_path,
    check_upload,
    deployment_dir,
    upload_path,
)
from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
from deepedge.controlplane.records import DeploymentRecord, Event, EventKind
from deepedge.controlplane.rollout_status import LIVE_VERSIONS, DeploymentStatus, VersionStatus
from deepedge.core.durable import write_atomically
from deepedge.core.errors import ConflictError, InvalidInputError
from deepedge.dataplane.sample_store import SampleStore, sample_store_path
from deepedge.service.records import JobId, TenantId
from deepedge.service.status import TERMINAL, Action, JobStatus
from deepedge.service.store import JobStore

log = logging.getLogger(__name__)
D, V = DeploymentStatus, VersionStatus
ATTEMPTS = 5


def _retry(
    registry: DeploymentStore,
    tenant_id: TenantId,
    name: str,
    build: Callable[[DeploymentRecord], Step],
) -> DeploymentRecord:
    for attempt in range(ATTEMPTS):
        current = registry.get(tenant_id, name)
        try:
            registry.commit(current, build(current))
        except ConflictError:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        return registry.get(tenant_id, name)
    raise AssertionError("unreachable")


def _live(deployment: DeploymentRecord) -> None:
    if deployment.status is D.STOPPED:
        raise ConflictError(f"deployment {deployment.name} is STOPPED")


def request_update(registry: DeploymentStore, tenant_id: TenantId, name: str) -> DeploymentRecord:
    def build(current: DeploymentRecord) -> Step:
        _live(current)
        return Step(
            deployment={"update_requested": 1},
            events=(Event(EventKind.UPDATE_REQUESTED, "update requested by the operator; "
                          "it starts at the next window unless an update is running"),),
        )  # fmt: skip

    return _retry(registry, tenant_id, name, build)


def roll_back(
    registry: DeploymentStore,
    tenant_id: TenantId,
    name: str,
    to_version: int | None = None,
    reason: str | None = None,
) -> DeploymentRecord:
    """Cancel a running canary, or put back the version the serving one replaced (or
    ``to_version``, which must have served before: RETIRED)."""

    def build(current: DeploymentRecord) -> Step:
        _live(current)
        why = f"by the operator{f' ({reason})' if reason else ''}"
        if current.canary_version is not None and to_version is None:
            return version_steps.roll_back_canary(current, why, detail={"manual": True})
        serving = current.serving_version
        if serving is None:
            raise ConflictError(f"deployment {name} serves no version yet")
        target = to_version
        if target is None:
            target = registry.version(current.id, serving).replaced
        if target is None:
            raise ConflictError(f"v{serving} of {name} replaced no version; nothing to go back to")
        if target == serving:
            raise ConflictError(f"v{target} already serves {name}")
        if registry.version(current.id, target).status is not V.RETIRED:
            raise ConflictError(f"v{target} never served {name} (only RETIRED versions return)")
        return version_steps.roll_back(current, serving, target, why, detail={"manual": True})

    return _retry(registry, tenant_id, name, build)


def stop(registry: DeploymentStore, tenant_id: TenantId, name: str) -> DeploymentRecord:
    """Stop the deployment (kept for its history): a version still on its way to a verdict
    (training, candidate or canary) is CANCELLED in the same step, and the job training it
    is asked to halt, so that no learner works for a stopped deployment (unless the job is
    an edge server's window that retrains other deployments too)."""
    jobs: list[JobId] = []

    def build(current: DeploymentRecord) -> Step:
        _live(current)
        live = [v for v in registry.versions(current.id) if v.status in LIVE_VERSIONS]
        jobs[:] = [v.job_id for v in live if v.status is V.TRAINING and v.job_id is not None]
        cancelled = ", ".join(f"v{v.number} ({v.status})" for v in live)
        return Step(
            deployment={"status": D.STOPPED, "canary_version": None, "canary_windows_done": 0,
                        "current_job_id": None},
            versions=tuple(VersionChange(v.number, V.CANCELLED) for v in live),
            events=(Event(EventKind.STOPPED, "stopped by the operator; history kept"
                          + (f"; cancelled {cancelled}" if cancelled else ""),
                          detail={"cancelled": [v.number for v in live]}),),
        )  # fmt: skip

    stopped = _retry(registry, tenant_id, name, build)
    # An edge server's window also retrains the other deployments on it: it runs on for them.
    shared = {v.job_id for v in registry.tenant_versions(tenant_id) if v.status is V.TRAINING}
    for job_id in jobs:
        if job_id in shared:
            continue
        halt_job(registry.store, job_id)
    return stopped


def halt_job(store: JobStore, job_id: JobId) -> bool:
    """Ask ``job_id`` to halt unless it has ended; whether it was asked."""
    if store.get(job_id).status in {*TERMINAL, JobStatus.HALTED}:
        return False
    store.request_action(job_id, Action.HALT.value)
    return True


def register_upload(
    registry: DeploymentStore,
    data_dir: Path,
    tenant_id: TenantId,
    name: str,
    model_file: bytes,
    flat: bool,
    note: str,
    skip_gate: bool,
    skip_canary: bool,
    code_shapes: Callable[[DeploymentRecord, Path], Shapes] | None = None,
) -> tuple[DeploymentRecord, int]:
    """Register a model trained elsewhere as the next version (parent: the serving one):
    ``model_file`` is a model file's bytes (a ``torch.save`` state_dict or a TorchScript
    archive) or, ``flat``, a ``.npy`` of its parameters (buffers: the serving version's).
    A TorchScript archive's tensors are read by ``code_shapes``, in the deployment's
    tenant's sandbox (without it, one is refused).

    It is checked against the serving version's tensors here (names and shapes, no model
    built) and left as the version's upload; the control loop loads it into the
    deployment's model, writes the version, and gates it on the newest window's
    golden-labelled sample (or, when the operator skips the gate, rolls it out at once),
    then canaries it unless skipped.
    """
    numbers: list[int] = []
    field = "weights_b64" if flat else "model_b64"

    def build(current: DeploymentRecord) -> Step:
        _live(current)
        if current.status is not D.ACTIVE or current.serving_version is None:
            raise ConflictError(
                f"deployment {name} is {current.status}; register a version when it is ACTIVE"
            )
        number = max(v.number for v in registry.versions(current.id)) + 1
        numbers.append(number)
        path = upload_path(data_dir, current, number, flat)
        write_atomically(path, model_file)
        try:
            reader = functools.partial(code_shapes, current) if code_shapes else None
            check_upload(artifact_path(data_dir, current, current.serving_version), path, field,
                         reader)  # fmt: skip
        except InvalidInputError:
            path.unlink(missing_ok=True)
            raise
        metrics = {"skip_gate": float(skip_gate), "skip_canary": float(skip_canary)}
        return Step(
            deployment={"status": D.UPDATING},
            new_versions=(NewVersion(number, current.serving_version, (), note,
                                     status=V.CANDIDATE, metrics=metrics),),
            events=(Event(EventKind.VERSION_REGISTERED, f"v{number} registered by the operator"
                          f"{' (gate skipped)' if skip_gate else ''}: {note}", version=number),),
        )  # fmt: skip

    return _retry(registry, tenant_id, name, build), numbers[-1]


@dataclass(frozen=True)
class Deleted:
    """A deleted deployment (as it was last stored) and what went with it."""

    deployment: DeploymentRecord
    samples: int  # its samples removed from the sample store (its raw inputs, labels)
    keys: int  # its inference keys, revoked ones too


def delete(
    registry: DeploymentStore,
    data_dir: Path,
    tenant_id: TenantId,
    name: str,
    confirm: str | None,
) -> Deleted:
    """Delete a deployment for good, in this order:

    1. stop it if it runs (its version in training is cancelled and its job halted, as
       :func:`stop`); a stopped deployment leaves the serving table, and STOPPED is final;
    2. remove its samples from the sample store (its served inputs and labels, counts and
       traffic, committed with a full sync) and mark it deleted there, so that a sample of
       a request still in flight is dropped, not kept
       (:meth:`~deepedge.dataplane.sample_store.SampleStore.delete_deployment`);
    3. remove its row, versions, windows, events and inference keys in one transaction
       (:meth:`DeploymentStore.delete`);
    4. remove its files.

    A failure after step 2 leaves a STOPPED deployment without samples, which the next
    delete finishes; the other order could leave samples that no deployment names. The
    name is free for a new deployment at once. ``confirm`` must repeat the name.

    This is the one place a deployment goes away: whatever else holds state of it (a data
    plane's serving applications and live samples) is removed here too.
    """
    if confirm != name:
        raise InvalidInputError(
            f"confirm: deleting deployment {name} removes its versions, windows, events, "
            "samples, inference keys and files for good; confirm with its name",
            field="confirm",
        )
    if registry.get(tenant_id, name).status is not D.STOPPED:
        stop(registry, tenant_id, name)
    store = SampleStore(sample_store_path(data_dir))
    try:
        samples = store.delete_deployment(registry.get(tenant_id, name).id)
    finally:
        store.close()
    for attempt in range(ATTEMPTS):
        current = registry.get(tenant_id, name)
        try:
            keys = registry.delete(current)
        except ConflictError:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        folder = deployment_dir(data_dir, current)
        shutil.rmtree(folder, ignore_errors=True)
        log.info("deployment %s (%s) deleted with %d samples, %d keys and %s", name,
                 current.id, samples, keys, folder)  # fmt: skip
        return Deleted(current, samples, keys)
    raise AssertionError("unreachable")
