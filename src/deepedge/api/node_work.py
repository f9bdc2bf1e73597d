"""What of a tenant's runs on each live node of the cluster, as the service knows it (pure).

The API holds no Ray connection: it reads the node watcher's snapshot, the tenant's
deployments and its running jobs' manifests, and states where each of them put work::

    replicas          a served live deployment: the first node of its target that is alive
                      (the data plane's pin, ``DataPlaneController._pinned``); none alive:
                      anywhere, so on no node here; one with a placement problem: its
                      replica groups, not listed here
    update-worker     a running live ``model-update`` job: each node of its ``nodes``
                      (none given: every alive node)
    parameter-server  the same job's ``ps_node``, when it names one (else Ray's choice at
                      run time, unknown here)
    window            a running ``ekya-window`` job of a live edge-server deployment: its
                      target's node
    learner           a running job's learner on a service whose learners run on Ray, when
                      its manifest pins it (``resources.node``)

A lost or left node has nothing on it: an update re-plans without a lost node and the data
plane moves replicas off it, so listing its last work would name jobs it is no longer part
of. Jobs are named by id, deployments by name; items are ordered by kind, then deployment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from deepedge.api.deployment_schemas import NodeWork, WorkKind
from deepedge.cluster.live_nodes import LiveNode
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployment_spec import TargetKind
from deepedge.controlplane.records import DeploymentRecord
from deepedge.service.manifest import DocumentSpec, JobKind, JobManifest, parse_manifest
from deepedge.service.records import JobRecord

GONE = frozenset({NodeStatus.LOST, NodeStatus.LEFT})
_ORDER = {kind: i for i, kind in enumerate(WorkKind)}


@dataclass(frozen=True)
class RunningJob:
    """A job of the tenant whose learner runs now (an ACTIVE status)."""

    id: str
    manifest: JobManifest


def running_jobs(records: Iterable[JobRecord]) -> list[RunningJob]:
    """The jobs of ``records`` with their manifests; one whose stored manifest no longer
    reads as a manifest (a job of an older deepedge) is left out: nothing is known of it."""
    jobs = []
    for record in records:
        try:
            manifest = parse_manifest(json.loads(record.manifest_json))
        except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
            continue
        jobs.append(RunningJob(record.id, manifest))
    return jobs


def node_work(
    nodes: Sequence[LiveNode],
    deployments: Iterable[DeploymentRecord],
    jobs: Iterable[RunningJob],
    learners_on_ray: bool,
) -> dict[str, list[NodeWork]]:
    """Every node id of ``nodes`` with what runs on it (module docstring)."""
    known = {n.node_id for n in nodes}
    placeable = [n.node_id for n in nodes if n.status is NodeStatus.ALIVE]
    gone = {n.node_id for n in nodes if n.status in GONE}
    live = sorted((r for r in deployments if r.spec.target.live), key=lambda r: r.name)
    owner: dict[str, str] = {}
    for record in live:
        if record.current_job_id is not None:
            owner.setdefault(record.current_job_id, record.name)
    work: dict[str, list[NodeWork]] = {n: [] for n in sorted(known)}

    def add(node: str | None, kind: WorkKind, **fields: Any) -> None:
        if node in known and node not in gone:
            work[node].append(NodeWork(kind=kind, **fields))

    for record in live:
        if record.serving_version is None or record.spec.placement is not None:
            continue
        pin = next((n for n in record.spec.target.nodes if n in placeable), None)
        add(pin, WorkKind.REPLICAS, deployment=record.name, version=record.serving_version)
    edge = {r.name: r.spec.target.nodes for r in live
            if r.spec.target.kind is TargetKind.EDGE_SERVER}  # fmt: skip
    for job in jobs:
        deployment = owner.get(job.id)
        mine = {"deployment": deployment, "job": job.id}
        manifest = job.manifest
        if learners_on_ray and manifest.resources.node is not None:
            add(manifest.resources.node, WorkKind.LEARNER, **mine)
        document = manifest.spec.document if isinstance(manifest.spec, DocumentSpec) else {}
        if manifest.kind is JobKind.MODEL_UPDATE and document.get("live_cluster") is True:
            named = document.get("nodes")
            workers = named if isinstance(named, list) else placeable
            for node in dict.fromkeys(str(n) for n in workers):
                add(node, WorkKind.UPDATE_WORKER, **mine)
            ps = document.get("ps_node")
            if isinstance(ps, str):
                add(ps, WorkKind.PARAMETER_SERVER, **mine)
        elif manifest.kind is JobKind.EKYA_WINDOW and deployment in edge:
            for node in edge[deployment][:1]:
                add(node, WorkKind.WINDOW, **mine)
    for items in work.values():
        items.sort(key=lambda w: (_ORDER[w.kind], w.deployment or "", w.job or ""))
    return work
