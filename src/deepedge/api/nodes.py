"""``GET /v1/nodes``: the site's nodes and what the caller runs on each: the agents of the
service's Ray cluster (the node watcher's snapshot, :mod:`deepedge.controlplane.live_nodes`:
each with its Ray node's id and address, and the work :mod:`deepedge.api.node_work` finds
there) when it runs on one, else the emulated testbed."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from deepedge.api.dependencies import TenantDep, deployment_store, json_response, service_state
from deepedge.api.deployment_schemas import NodeAllocation, NodeList, NodeView, NodeWork
from deepedge.api.node_work import GONE, node_work, running_jobs
from deepedge.cluster.live_nodes import STALE_AFTER_S, LiveNodes, read_snapshot
from deepedge.controlplane.deployment_spec import SITE_NODES, SiteNode, TargetKind
from deepedge.controlplane.records import DeploymentRecord, EventKind
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.core.errors import DependencyUnavailableError
from deepedge.service.status import ACTIVE, JobStatus

router = APIRouter(prefix="/v1", tags=["deployments", "nodes"])


@router.get("/nodes", response_model=NodeList)
def nodes(request: Request, tenant: TenantDep) -> Response:
    """The site's nodes (the cluster's agents on a service with a Ray cluster, else the
    emulated testbed; the emulated edge servers either way), with the tenant's deployments,
    canaries, running update jobs and the newest allocation of each deployment's updates on
    them."""
    state = service_state(request)
    registry = deployment_store(request)
    live = [r for r in registry.of_tenant(tenant.id) if r.status is not DeploymentStatus.STOPPED]
    running: dict[str, str] = {}
    ps_nodes: dict[str, str] = {}  # deployment -> the node its newest live update's PS ran on
    allocations: dict[str, list[NodeAllocation]] = {}
    for record in live:
        if record.current_job_id is not None:
            job = state.store.get(record.current_job_id)
            if job.status in ACTIVE | {JobStatus.QUEUED, JobStatus.PENDING}:
                running[record.name] = job.id
        event = registry.last_event(record.id, EventKind.ALLOCATION)
        if event is None:
            continue
        if event.detail.get("ps_node"):  # a live update's parameter server, by Ray
            ps_nodes[record.name] = str(event.detail["ps_node"])
        for worker in event.detail.get("workers", []):
            allocations.setdefault(str(worker.get("node")), []).append(
                NodeAllocation(
                    deployment=record.name, version=event.version, window=event.window,
                    batch=worker.get("batch"), shard=worker.get("shard"),
                    selected=bool(worker.get("selected")),
                )
            )  # fmt: skip
        # An Ekya window on the edge server: the window's decision lists every stream of
        # the server; this deployment holds its own stream's shares.
        for stream in event.detail.get("streams", []):
            if stream.get("stream_id") != record.name:
                continue
            allocations.setdefault(str(event.detail.get("server")), []).append(
                NodeAllocation(
                    deployment=record.name, version=event.version, window=event.window,
                    batch=None, shard=None, selected=stream.get("retraining_config") is not None,
                    policy="ekya-window", inference_config=stream.get("inference_config"),
                    inference_gpus=stream.get("inference_gpus"),
                    retraining_config=stream.get("retraining_config"),
                    retraining_gpus=stream.get("retraining_gpus"), gpus=event.detail.get("gpus"),
                )
            )  # fmt: skip
    settings = state.settings
    if settings.ray_address is not None:
        snapshot = read_snapshot(settings.data_dir)
        if snapshot is None:
            raise DependencyUnavailableError(
                f"no view of the Ray cluster at {settings.ray_address} yet: the service's "
                "node watcher has not written one"
            )
        mine = [j for j in state.store.jobs_in(ACTIVE) if j.tenant_id == tenant.id]
        work = node_work(snapshot.nodes, live, running_jobs(mine), settings.learners_on_ray)
        page = _live_view(snapshot, live, running, allocations, ps_nodes, work)
        edge = [_emulated_view(n, live, running, allocations) for n in SITE_NODES
                if n.role == "edge-server"]  # fmt: skip
        edge = [v for v in edge if v.deployments]  # an Ekya deployment's server, if any
        return json_response(page.model_copy(update={"nodes": [*page.nodes, *edge]}))
    views = [_emulated_view(n, live, running, allocations) for n in SITE_NODES]
    return json_response(NodeList(nodes=views))


def _emulated_view(
    node: SiteNode,
    deployments: list[DeploymentRecord],
    running: dict[str, str],
    allocations: dict[str, list[NodeAllocation]],
) -> NodeView:
    """An emulated node with the deployments on it (live targets are not on it)."""
    emulated = [r for r in deployments if not r.spec.target.live]
    # The parameter server serves every deployment updated across the emulated nodes.
    ps = node.role == "parameter-server"
    serving = [r for r in emulated if node.name in r.spec.target.nodes
               or (ps and r.spec.target.kind is TargetKind.NODES)]  # fmt: skip
    return NodeView(
        name=node.name, device=node.device, role=node.role, state="up",
        emulated_utilisation={"cpu": node.cpu_util, "gpu": node.gpu_util, "mem": node.mem_util},
        deployments=[r.name for r in serving],
        canary=[r.name for r in serving
                if r.canary_version is not None and node.name in r.spec.canary_nodes()],
        jobs=sorted(running[r.name] for r in serving if r.name in running),
        allocations=allocations.get(node.name, []),
    )  # fmt: skip


def _live_view(
    snapshot: LiveNodes,
    deployments: list[DeploymentRecord],
    running: dict[str, str],
    allocations: dict[str, list[NodeAllocation]],
    ps_nodes: dict[str, str],
    work: dict[str, list[NodeWork]],
) -> NodeList:
    """The agents of the cluster with the tenant's live deployments on them: those whose
    target names the node, or whose parameter server is there (named, or where the newest
    update's ran), and what runs there (``work``). A lost or left node is part of no
    running update job."""
    views = []
    for node in sorted(snapshot.nodes, key=lambda n: n.node_id):
        name = node.node_id
        gone = node.status in GONE
        ps = [r for r in deployments if r.spec.target.live
              and name in {r.spec.update.ps_node, ps_nodes.get(r.name)}]  # fmt: skip
        serving = [r for r in deployments if r.spec.target.live and name in r.spec.target.nodes]
        views.append(
            NodeView(
                name=name, device=node.device,
                role="parameter-server" if ps and not serving else "worker",
                state="up" if node.status.value == "alive" else node.status.value,
                emulated_utilisation={}, source="live",
                utilisation={"cpu": node.cpu_util, "gpu": node.gpu_util, "mem": node.mem_util},
                age_s=round(node.age_s, 2),
                apps=[a.model_dump() for a in node.apps], labels=node.labels,
                ray_node_id=node.ray_node_id,
                resources=node.resources.model_dump(),
                hostname=node.hostname or None, address=node.address or None,
                lost_at=node.lost_at, work=work.get(name, []),
                deployments=sorted({r.name for r in serving + ps}),
                canary=[r.name for r in serving
                        if r.canary_version is not None and name in r.spec.canary_nodes()],
                jobs=[] if gone else sorted({running[r.name] for r in serving + ps
                                             if r.name in running}),
                allocations=allocations.get(name, []),
            )
        )  # fmt: skip
    stale = time.time() - snapshot.taken_at > STALE_AFTER_S
    return NodeList(nodes=views, cluster=snapshot.ray_address, taken_at=snapshot.taken_at,
                    stale=stale)  # fmt: skip
