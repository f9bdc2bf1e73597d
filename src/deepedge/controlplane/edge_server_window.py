"""One Ekya window per edge server: the deployments placed on one edge server share its
GPUs, so their retraining windows are scheduled together (Ekya Sec. 4), never one
deployment at a time.

When deployments on edge server ``e`` have versions waiting to be trained (a trigger fired),
no window of ``e`` is running and one stream window has passed since the first of those
triggers (so that triggers in the same stream window retrain together), the control plane
submits ONE ``ekya-window`` job
(:class:`~deepedge.service.ekya_jobs.EdgeWindowSpec`) whose streams are

* every waiting deployment (a *retraining* stream: its golden-labelled windows and the
  weights of the version it retrains), and
* every other deployment serving on ``e`` (an *inference-only* stream at its last measured
  accuracy: its inference still takes its share of the server),

so Thief decides ``I_v`` and ``R_v`` for all streams with ``sum_v (I_v + R_v) <= G``, where
``G`` is the server's GPUs (every deployment on ``e`` declares the same ``target.gpus``;
:meth:`DeploymentStore.create` refuses another). Triggers that fire while the window runs
wait for the next one. Each deployment's share is then recorded as its own ``allocation``
event from that one decision.

A *live* edge server is an agent of the service's Ray cluster (``target.live``): ``G`` is
then what the node registry says the node has now (its GPUs, else its CPU cores:
:func:`~deepedge.controlplane.live_nodes.edge_server_capacity`), the window's actors and
tasks are pinned to the node (``live_node`` in the job's document), and the job itself asks
the tenant's quota only for its driver (one core on the learner's host): the node's
resources are Ray's to account. A live server that is not alive when its window is due
fails the waiting versions, naming it, rather than training elsewhere.

Restart safety: the job's idempotency key is the server and the oldest waiting version, so
a service killed between submitting the job and recording it on the versions submits the
same job again; the versions recorded are the ones the job's own document names.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from deepedge.cluster.live_nodes import LiveNodes
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployment_spec import (
    MIN_UPDATE_SAMPLES,
    UpdatePolicy,
    UpdateResources,
)
from deepedge.controlplane.deployments import Step, VersionChange
from deepedge.controlplane.live_nodes import edge_server_capacity
from deepedge.controlplane.records import DeploymentRecord, Event, EventKind, ModelVersion
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.controlplane.update_jobs import ekya_allocation
from deepedge.controlplane.update_resources import LearnerRequest
from deepedge.core.errors import NotFoundError, QuotaExceededError
from deepedge.service.ekya_jobs import EdgeWindowSpec
from deepedge.service.manifest import JobKind, JobManifest
from deepedge.service.records import JobRecord, TenantId
from deepedge.service.store import manifest_of

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from pathlib import Path

    from deepedge.controlplane.deployments import DeploymentStore
    from deepedge.service.store import JobStore
    from deepedge.service.workspace import Workspace

log = logging.getLogger(__name__)

V = VersionStatus


def server_of(deployment: DeploymentRecord) -> str | None:
    """The edge server a deployment's Ekya windows run on (None: not an edge deployment)."""
    if deployment.spec.update.policy is not UpdatePolicy.EKYA_WINDOW:
        return None
    return deployment.spec.target.nodes[0]


def edge_resources(
    capacity_gpus: float, host_gpus: int, mem_mb: int, live: bool = False
) -> dict[str, Any]:
    """What an edge server's window asks of the tenant's quota: the server's GPUs on a
    host with GPUs (whole GPUs: the quota counts GPUs), else its cores (the shares are CPU
    threads there); ``mem_mb`` as the control plane sized it
    (:mod:`deepedge.controlplane.update_resources`). Training yields the CPU to the service
    (nice 5). A live server's window runs on its node: the job is only the driver."""
    if live:
        return {"cpus": 1, "gpus": 0, "mem_mb": mem_mb, "nice": 5}
    if host_gpus > 0:
        return {"cpus": 1, "gpus": math.ceil(capacity_gpus - 1e-9), "mem_mb": mem_mb, "nice": 5}
    return {"cpus": capacity_gpus, "gpus": 0, "mem_mb": mem_mb, "nice": 5}


def window_document(job: JobRecord) -> EdgeWindowSpec | None:
    """The edge server's window a job runs (None for any other job)."""
    if job.kind != JobKind.EKYA_WINDOW.value:
        return None
    document = getattr(manifest_of(job).spec, "document", None)
    if not isinstance(document, dict) or "edge_server" not in document:
        return None
    return EdgeWindowSpec.model_validate(document)


def _files(name: str) -> tuple[str, str]:
    """A stream's staged files in the job's work folder: training data, the deployed model
    (its version's artifact, copied as it is)."""
    return f"{name}.train.npz", f"{name}.weights.pt"


class WindowHost(Protocol):
    """What an edge server's windows need of the control loop that drives them (the loop
    passes itself; this module never imports it)."""

    store: JobStore
    deployments: DeploymentStore
    workspace: Workspace
    tick_lock: threading.Lock
    wake_manager: Callable[[], None]

    def artifact(self, deployment: DeploymentRecord, number: int) -> Path: ...

    def host_gpus(self) -> int: ...

    def learner_request(self, resources: UpdateResources, data_mb: float) -> LearnerRequest: ...

    def job_failed(self, deployment: DeploymentRecord, version: ModelVersion, why: str) -> None: ...

    def live_nodes(self) -> LiveNodes: ...

    def training_data(
        self, deployment: DeploymentRecord, version: ModelVersion
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]: ...


class EdgeServerWindows:
    """The control plane's joint windows (module docstring); state lives in the store."""

    def __init__(self, plane: WindowHost) -> None:
        self.plane = plane

    def _on_server(self, tenant_id: TenantId, server: str) -> list[DeploymentRecord]:
        return [
            d
            for d in self.plane.deployments.live()
            if d.tenant_id == tenant_id and server_of(d) == server
        ]

    def submit(self, tenant_id: TenantId, server: str, now: float) -> None:
        """Start the server's next window if versions wait and none runs."""
        plane = self.plane
        deployments = self._on_server(tenant_id, server)
        versions = {d.id: plane.deployments.versions(d.id) for d in deployments}
        training = [v for d in deployments for v in versions[d.id] if v.status is V.TRAINING]
        running = {v.job_id for v in training if v.job_id is not None}
        if running:  # the server's window runs; waiting triggers go into the next one
            for job_id in sorted(running):  # (after a crash mid-record: record the rest)
                job = plane.store.get(job_id)
                spec = window_document(job)
                if spec is not None:
                    self._record_submitted(job, spec)
            return
        waiting = sorted(
            ((d, v) for d in deployments for v in versions[d.id]
             if v.status is V.TRAINING and v.job_id is None and v.parent is not None),
            key=lambda dv: (dv[1].created_at, dv[0].id),
        )  # fmt: skip
        if not waiting or now < self._gathered_at(waiting[0], deployments):
            return
        members: list[tuple[DeploymentRecord, ModelVersion]] = []
        for d, v in waiting:
            samples = len(plane.training_data(d, v)[0][1])
            if samples < MIN_UPDATE_SAMPLES:  # an update asked for before enough windows
                plane.job_failed(d, v, f"only {samples} training samples in windows "
                                 f"{list(v.data_windows)}; need {MIN_UPDATE_SAMPLES}")  # fmt: skip
            else:
                members.append((d, v))
        if not members:
            return
        retraining = {d.id for d, _ in members}
        others = [
            d for d in deployments if d.id not in retraining and d.serving_version is not None
        ]
        first_d, first_v = members[0]
        live = first_d.spec.target.live
        capacity, device = min(d.spec.target.gpus for d in deployments), None
        if live:
            node = plane.live_nodes().node(server)
            if node is None or node.status is not NodeStatus.ALIVE:
                for d, v in members:
                    plane.job_failed(d, v, f"its edge server {server} is not an alive agent of "
                                     "the cluster; its window runs nowhere else")  # fmt: skip
                return
            capacity = edge_server_capacity(node)
            device = "cuda" if node.resources.gpus > 0 else "cpu"
        streams: list[dict[str, Any]] = []
        for d, v in members:
            train, weights = _files(d.name)
            streams.append(_stream(d, weights, v.parent, train_data=train, version=v.number))
        for d in others:
            streams.append(
                _stream(d, _files(d.name)[1], d.serving_version, current_accuracy=d.last_accuracy)
            )
        document = {
            "edge_server": server,
            "gpus": capacity,
            "window_s": min(d.spec.update.retraining_window_s for d, _ in members),
            "seed": first_d.spec.stream.seed + first_v.number,
            "streams": streams,
        }
        if live:
            document.update(live_node=server, device=device)
        EdgeWindowSpec.model_validate(document)
        mem_mb = plane.learner_request(first_d.spec.update.resources, 0.0).mem_mb
        manifest = JobManifest.model_validate(
            {
                "name": f"{server}-window",
                "kind": JobKind.EKYA_WINDOW,
                "resources": edge_resources(
                    capacity, 0 if live else plane.host_gpus(), mem_mb, live=live
                ),
                "checkpoint_interval_s": 30,
                "restart_limit": 2,
                "retry_limit": 2,
                "spec": {"document": document},
            }
        )
        key = f"edge-window-{server}-{first_d.id}-v{first_v.number}"
        try:
            with plane.tick_lock:
                job, _ = plane.store.submit(plane.store.tenant(tenant_id), manifest, key)
                spec = window_document(job)
                assert spec is not None
                self.stage(job, spec)
        except QuotaExceededError as exc:
            for d, v in members:
                plane.job_failed(d, v, f"the window of {server} was refused: {exc.message}")
            return
        plane.wake_manager()
        self._record_submitted(job, spec)

    def _gathered_at(
        self, first: tuple[DeploymentRecord, ModelVersion], deployments: list[DeploymentRecord]
    ) -> float:
        """When the server's window opens: one stream window (the shortest ``window_s`` of
        its deployments) after the window that triggered the first waiting version, so that
        every deployment on the server has scored a window by then and those whose drop
        shows in it retrain together (-inf: that window is no longer at hand, e.g. after
        downtime)."""
        d, v = first
        window = max(v.data_windows)
        due = self.plane.deployments.recent_window_due_at(d.id, window)
        if due is None:
            return -math.inf
        return due + min(x.spec.window_s for x in deployments)

    def _record_submitted(self, job: JobRecord, spec: EdgeWindowSpec) -> None:
        """Each retraining stream's version gets the job (as named by the job's document)."""
        plane = self.plane
        ids = [s.stream_id for s in spec.streams]
        retrained = [s.stream_id for s in spec.retraining()]
        for stream in spec.retraining():
            assert stream.version is not None
            d = plane.deployments.get(job.tenant_id, stream.stream_id)
            v = plane.deployments.version(d.id, stream.version)
            if v.job_id is not None or v.status is not V.TRAINING:
                continue
            window = max(v.data_windows)
            due = plane.deployments.recent_window_due_at(d.id, window)
            plane.deployments.commit(
                d,
                Step(
                    deployment={"current_job_id": job.id},
                    versions=(VersionChange(v.number, job_id=job.id),),
                    events=(
                        Event(EventKind.JOB_SUBMITTED,
                              f"ekya-window job {job.id}: {spec.edge_server}'s window "
                              f"retrains v{v.number} from v{v.parent} on windows "
                              f"{list(v.data_windows)} beside {len(ids) - 1} other stream(s)",
                              window=window, version=v.number, job_id=job.id,
                              detail={"window_due_at": due, "edge_server": spec.edge_server,
                                      "streams": ids, "retraining": retrained,
                                      "nodes": [spec.edge_server], "gpus": spec.gpus,
                                      "live": spec.live_node is not None}),
                    ),
                ),
            )  # fmt: skip

    def stage(self, job: JobRecord, spec: EdgeWindowSpec) -> None:
        """Write each stream's files (deterministic, so a restarted service writes the same
        ones); those already there are kept. Called under the tick lock."""
        plane = self.plane
        work = plane.workspace.job_dir(job.tenant_id, job.id).work
        work.mkdir(parents=True, exist_ok=True)
        for stream in spec.streams:
            target = work / stream.initial_weights
            staged = stream.train_data is None or (work / stream.train_data).exists()
            if target.exists() and staged:
                continue
            d = plane.deployments.get(job.tenant_id, stream.stream_id)
            if stream.version is None:
                number = stream.weights_version or d.serving_version
                assert number is not None
                source = plane.artifact(d, number)
            else:
                v = plane.deployments.version(d.id, stream.version)
                source = plane.artifact(d, v.parent or 0)
                assert stream.train_data is not None
                train, val = plane.training_data(d, v)
                tmp = work / f"{stream.stream_id}.tmp.npz"
                np.savez(tmp, x_train=train[0], y_train=train[1], x_val=val[0], y_val=val[1])
                tmp.replace(work / stream.train_data)
            tmp_w = work / f"{stream.stream_id}.tmp.pt"
            tmp_w.write_bytes(source.read_bytes())
            tmp_w.replace(target)

    def restage_if_missing(self, job: JobRecord) -> bool:
        """For a queued job after a crash between submit and staging; False if the job is
        not an edge server's window."""
        spec = window_document(job)
        if spec is None:
            return False
        with self.plane.tick_lock:
            self.stage(job, spec)
        return True

    def record_inference_shares(self, job: JobRecord, result: dict[str, Any]) -> None:
        """The inference-only streams' shares of the joint decision, as their deployments'
        ``allocation`` events (once per job)."""
        spec = window_document(job)
        if spec is None:
            return
        plane = self.plane
        for stream in spec.streams:
            if stream.version is not None:
                continue
            try:
                d = plane.deployments.get(job.tenant_id, stream.stream_id)
            except NotFoundError:
                continue
            last = plane.deployments.last_event(d.id, EventKind.ALLOCATION)
            if last is not None and last.job_id == job.id:
                continue
            event = ekya_allocation(d.name, spec.edge_server, d.serving_version, max(d.window, 0),
                                    job.id, result)  # fmt: skip
            if event is not None:
                plane.deployments.commit(d, Step(events=(event,)))


def _stream(
    d: DeploymentRecord,
    weights: str,
    weights_version: int | None,
    train_data: str | None = None,
    version: int | None = None,
    current_accuracy: float | None = None,
) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "stream_id": d.name,
        "initial_weights": weights,
        "inference_gpus": d.spec.target.inference_gpus,
        "current_accuracy": current_accuracy or 0.0,
        "weights_version": weights_version,
        "min_gain": d.spec.gate.min_gain,
    }
    if train_data is not None:
        stream.update(train_data=train_data, version=version)
    if d.spec.user_workload is not None:
        stream["workload"] = d.spec.user_workload
    return stream
