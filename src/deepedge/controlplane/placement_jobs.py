"""A deployment's MVSP placement, solved once by a ``placement`` job.

State lives in the deployment's newest ``placement`` event: submitted -> decided | failed.
The decided event carries the solution (variants, instances, nodes, the routes of each
camera) that the data plane serves as replica groups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.controlplane.records import DeploymentRecord, Event, EventKind
from deepedge.controlplane.update_jobs import job_ended, read_json
from deepedge.service.manifest import JobKind, JobManifest
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore
from deepedge.service.workspace import Workspace

DECISION_KEYS = ("method", "status", "objective", "avg_latency_ms", "gap", "placements",
                 "routes")  # (the data plane routes each camera as the decision says)  # fmt: skip


def advance_placement(store: JobStore, deployments: DeploymentStore, workspace: Workspace,
                      tick_lock: threading.Lock, wake_manager: Callable[[], None],
                      deployment: DeploymentRecord) -> None:  # fmt: skip
    """Submit the placement job once, then record its decision (or failure) once."""
    last = deployments.last_event(deployment.id, EventKind.PLACEMENT)
    state = last.detail.get("state") if last is not None else None
    if state in {"decided", "failed"}:
        return
    if last is None:
        manifest = JobManifest.model_validate(
            {"name": f"{deployment.name}-placement", "kind": JobKind.PLACEMENT,
             "resources": {"cpus": 1, "mem_mb": 4096}, "retry_limit": 1,
             "restart_limit": 1, "spec": {"document": deployment.spec.placement}}
        )  # fmt: skip
        tenant = store.tenant(deployment.tenant_id)
        key = f"deployment-{deployment.id}-placement"
        with tick_lock:
            job, _ = store.submit(tenant, manifest, idempotency_key=key)
        wake_manager()
        event = Event(EventKind.PLACEMENT, f"placement job {job.id} solves the MVSP problem",
                      job_id=job.id, detail={"state": "submitted"})  # fmt: skip
        deployments.commit(deployment, Step(events=(event,)))
        return
    assert last.job_id is not None
    job = store.get(last.job_id)
    if job.status is JobStatus.COMPLETED:
        result = read_json(workspace.job_dir(job.tenant_id, job.id).results / "result.json")
        placed = [f"{p.get('variant')}x{p.get('instances', 1)}@{p.get('node')}"
                  for p in result.get("placements", []) if isinstance(p, dict)]  # fmt: skip
        detail = {"state": "decided", **{k: result.get(k) for k in DECISION_KEYS}}
        event = Event(EventKind.PLACEMENT, f"placement decided ({result.get('status')}): "
                      f"{', '.join(placed) or 'nothing placed'}", job_id=job.id,
                      detail=detail)  # fmt: skip
    elif job.status in {JobStatus.FAILED, JobStatus.HALTED}:
        event = Event(EventKind.PLACEMENT, f"placement {job_ended(job, store.history(job.id))}",
                      job_id=job.id, detail={"state": "failed"})  # fmt: skip
    else:
        return
    deployments.commit(deployment, Step(events=(event,)))
