"""What the data plane should serve, read from the control plane's store.

:func:`serving_table` turns the store's state into the data plane's
:class:`~deepedge.dataplane.serving_table.ServingTable`: every deployment that is not
stopped and has a serving version, with the versions it serves (serving, canary with its
share, and the version a rollback would restore, kept loaded), their TorchScript exports,
its replica shape and sampling from the deployment's ``serving`` section, and every live
inference key (a deployment that does not fit its tenant's quota or the data plane's
capacity waits: :mod:`deepedge.controlplane.serving_capacity`). A version whose export is
not on disk yet is left out (the table keeps the
deployment on what can be served). A deployment with an MVSP placement problem carries the
newest decided placement as replica groups and a camera table
(:mod:`deepedge.dataplane.replica_groups`); an edge-server deployment carries Ekya's newest
inference share for its stream (its ``allocation`` event), which its replicas run with.
:class:`TableSource` is the picklable callable the data plane's controller runs to read it
(in the controller's own process, on the service's node).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from deepedge.controlplane.artifacts import artifact_path, served_path
from deepedge.controlplane.deployment_spec import DeploymentSpec, TargetKind
from deepedge.controlplane.deployments import DeploymentStore
from deepedge.controlplane.inference_keys import InferenceKeyStore
from deepedge.controlplane.records import DeploymentRecord, Event, EventKind
from deepedge.controlplane.serving_capacity import Admission, Demand, Quota, admit, demand_of
from deepedge.dataplane.protocol import classifier_signature
from deepedge.dataplane.replica_groups import GroupPlan, plan_of, served_model
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.sample_store import Retention
from deepedge.dataplane.serving_table import (
    InferenceShare,
    ModelRoute,
    ReplicaShape,
    ServingTable,
    model_name,
)
from deepedge.learning.export import ServedModel, sidecar
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore
from deepedge.service.tables import DeploymentRow, InferenceKeyRow

_digests: dict[tuple[Path, float, int], str] = {}
_stores: dict[str, JobStore] = {}
_last: dict[tuple[str, str], tuple[tuple[object, ...], float, ServingTable]] = {}
REBUILD_S = 10.0  # the table is rebuilt at least this often, changed or not


def file_digest(path: Path) -> str:
    """The file's SHA-256 (cached by path, modification time and size)."""
    stat = path.stat()
    key = (path, stat.st_mtime, stat.st_size)
    if key not in _digests:
        _digests[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _digests[key]


def replica_shape(spec: DeploymentSpec, share: InferenceShare | None = None) -> ReplicaShape:
    """The serving section's shape, on the target's nodes; on a GPU (replicas that take one,
    or a live edge server whose node has one), Ekya's share for the stream is split among
    its replicas as their GPU fractions (whole GPUs past one: Ray's rule)."""
    s = spec.serving
    gpus = s.gpus
    if share is not None and (gpus > 0 or share.on_gpu):
        part = share.per_replica(s.replicas)
        gpus = part if part <= 1 else float(round(part))
    return ReplicaShape(s.replicas, s.cpus, gpus, s.max_batch_size, s.batch_wait_ms,
                        nodes=tuple(spec.target.nodes))  # fmt: skip


def placement_groups(name: str, spec: DeploymentSpec, decided: Event | None) -> GroupPlan | None:
    """The replica groups of the deployment's newest decided placement (None without a
    problem, a decision, or this deployment's model in the problem)."""
    from deepedge.planning.placement.model import PlacementProblem, PlacementSolution

    if spec.placement is None or decided is None or decided.detail.get("state") != "decided":
        return None
    problem = PlacementProblem.model_validate(spec.placement)
    model = served_model(problem, name)
    if model is None:
        return None
    solution = PlacementSolution.model_validate(
        {"problem": problem.name, "method": decided.detail.get("method") or "auto",
         "status": decided.detail.get("status") or "feasible",
         "placements": decided.detail.get("placements") or [],
         "routes": decided.detail.get("routes") or []}
    )  # fmt: skip
    plan = plan_of(problem, solution, model)
    return plan if plan.groups else None


def inference_share(name: str, spec: DeploymentSpec, allocation: Event | None
                    ) -> InferenceShare | None:  # fmt: skip
    """Thief's inference share for the deployment's stream in its newest Ekya window."""
    if spec.target.kind is not TargetKind.EDGE_SERVER or allocation is None:
        return None
    detail = allocation.detail
    if detail.get("policy") != "ekya-window":
        return None
    own = next((s for s in detail.get("streams") or [] if s.get("stream_id") == name), None)
    if own is None or own.get("inference_gpus") is None:
        return None
    # a live node's device is the registry's: its GPU is Ray's to give the replicas
    on_gpu = spec.target.live and detail.get("device") == "cuda"
    return InferenceShare(float(own["inference_gpus"]), allocation.window,
                          str(detail.get("server") or ""), on_gpu)  # fmt: skip


def retention(spec: DeploymentSpec) -> Retention:
    r = spec.serving.retention
    return Retention(r.max_samples, int(r.max_mb * (1 << 20)), r.max_age_h * 3600.0)


def route_of(
    deployment: DeploymentRecord,
    tenant: str,
    data_dir: Path,
    placement: Event | None = None,
    allocation: Event | None = None,
) -> ModelRoute | None:
    """The deployment's route, or None when it has nothing servable yet; ``placement`` and
    ``allocation`` are its newest events of those kinds."""
    if deployment.serving_version is None:
        return None
    spec = deployment.spec

    def exported(number: int | None) -> Path | None:
        if number is None:
            return None
        path = served_path(artifact_path(data_dir, deployment, number))
        return path if path.exists() and sidecar(path).exists() else None

    serving = exported(deployment.serving_version)
    if serving is None:
        return None
    canary = exported(deployment.canary_version)
    previous = exported(deployment.previous_version)
    versions = Versions(
        serving=deployment.serving_version,
        canary=deployment.canary_version if canary is not None else None,
        canary_share=spec.canary.fraction if canary is not None else 0.0,
        previous=deployment.previous_version if previous is not None else None,
    )
    files = {n: exported(n) for n in versions.loaded()}
    served = ServedModel.read(sidecar(serving))
    share = inference_share(deployment.name, spec, allocation)
    return ModelRoute(
        model=model_name(tenant, deployment.name),
        deployment_id=deployment.id,
        tenant_id=deployment.tenant_id,
        signature=classifier_signature(served.input_shape, len(served.class_names)),
        class_names=served.class_names,
        versions=versions,
        artifacts={n: str(p) for n, p in files.items() if p is not None},
        digests={n: file_digest(p) for n, p in files.items() if p is not None},
        shape=replica_shape(spec, share),
        sample_fraction=spec.serving.sample_fraction,
        retention=retention(spec),
        groups=placement_groups(deployment.name, spec, placement),
        share=share,
    )


def serving_capacity(settings: ServiceSettings) -> tuple[float | None, float | None]:
    """The data plane's CPUs and GPUs its deployments share: the embedded head's (its
    ``serving_cpus``, else this machine's; the host's GPUs); None on a cluster, where Ray
    places the replicas (:mod:`deepedge.controlplane.serving_capacity`)."""
    if settings.ray_address is not None:
        return None, None
    return float(settings.serving_cpus or os.cpu_count() or 1), float(settings.host_gpus or 0)


def admissions(
    store: JobStore, deployments: Sequence[DeploymentRecord], cpus: float | None,
    gpus: float | None,
) -> tuple[list[Demand], dict[str, Admission]]:  # fmt: skip
    """Which live deployments the data plane serves (:func:`serving_capacity.admit`)."""
    demands = [
        demand_of(d.id, d.name, d.tenant_id, d.created_at, d.spec.serving.replicas,
                  d.spec.serving.cpus, d.spec.serving.gpus)
        for d in deployments
    ]  # fmt: skip
    quotas: dict[str, Quota] = {}
    for tenant_id in {d.tenant_id for d in deployments}:
        tenant = store.tenant(tenant_id)
        quotas[tenant_id] = Quota(tenant.max_cores, float(tenant.max_gpus))
    return demands, admit(demands, quotas, cpus, gpus)


def serving_table(
    store: JobStore, data_dir: Path, cpus: float | None = None, gpus: float | None = None
) -> ServingTable:
    routes: dict[str, ModelRoute] = {}
    tenants: dict[str, str] = {}
    deployments = DeploymentStore(store)
    live = deployments.live()
    _, admitted = admissions(store, live, cpus, gpus)
    for deployment in live:
        if not admitted[deployment.id].admitted:
            continue  # it waits, and its event says why (the control loop's)
        if deployment.tenant_id not in tenants:
            tenants[deployment.tenant_id] = store.tenant(deployment.tenant_id).name
        spec = deployment.spec
        placement = (deployments.last_event(deployment.id, EventKind.PLACEMENT)
                     if spec.placement is not None else None)  # fmt: skip
        allocation = (deployments.last_event(deployment.id, EventKind.ALLOCATION)
                      if spec.target.kind is TargetKind.EDGE_SERVER else None)  # fmt: skip
        route = route_of(deployment, tenants[deployment.tenant_id], data_dir, placement,
                         allocation)  # fmt: skip
        if route is not None:
            routes[route.model] = route
    return ServingTable.build(routes, InferenceKeyStore(store).live_grants())


def store_fingerprint(store: JobStore) -> tuple[object, ...]:
    """What changes whenever the table may: every deployment commit bumps its row's
    ``version``, every key is created or revoked with a timestamp."""
    deployments, keys = DeploymentRow.__table__, InferenceKeyRow.__table__
    with store.read_connection() as conn:
        d = conn.execute(select(func.count(), func.sum(deployments.c.version),
                                func.max(deployments.c.updated_at))).one()  # fmt: skip
        k = conn.execute(select(func.count(), func.count(keys.c.revoked_at),
                                func.max(keys.c.created_at),
                                func.max(keys.c.revoked_at))).one()  # fmt: skip
    return (*d, *k)


@dataclass(frozen=True)
class TableSource:
    """``source()`` -> the serving table of the store at ``url`` (picklable: the data
    plane's controller calls it in its own process, several times a second). The table is
    rebuilt only when :func:`store_fingerprint` changed, and every ``REBUILD_S`` anyway."""

    url: str
    data_dir: str
    cpus: float | None = None  # the data plane's capacity (serving_capacity)
    gpus: float | None = None

    def __call__(self) -> ServingTable:
        store = _stores.get(self.url)
        if store is None:
            store = _stores[self.url] = JobStore(self.url)
        key = (self.url, self.data_dir)
        fingerprint = store_fingerprint(store)
        last = _last.get(key)
        now = time.monotonic()
        if last is not None and last[0] == fingerprint and now - last[1] < REBUILD_S:
            return last[2]
        table = serving_table(store, Path(self.data_dir), self.cpus, self.gpus)
        _last[key] = (fingerprint, now, table)
        return table
