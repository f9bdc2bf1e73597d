"""``GET /v1/nodes``: the site's (emulated) nodes and what the caller runs on each."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from deepedge.api.dependencies import TenantDep, deployment_store, json_response, service_state
from deepedge.api.deployment_schemas import NodeAllocation, NodeList, NodeView
from deepedge.controlplane.deployment_spec import SITE_NODES, TargetKind
from deepedge.controlplane.records import EventKind
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.service.status import ACTIVE, JobStatus

router = APIRouter(prefix="/v1", tags=["deployments", "nodes"])


@router.get("/nodes", response_model=NodeList)
def nodes(request: Request, tenant: TenantDep) -> Response:
    """The site's emulated nodes, with the tenant's deployments, canaries, running update
    jobs and the newest allocation of each deployment's updates on them."""
    state = service_state(request)
    registry = deployment_store(request)
    live = [r for r in registry.of_tenant(tenant.id) if r.status is not DeploymentStatus.STOPPED]
    running: dict[str, str] = {}
    allocations: dict[str, list[NodeAllocation]] = {}
    for record in live:
        if record.current_job_id is not None:
            job = state.store.get(record.current_job_id)
            if job.status in ACTIVE | {JobStatus.QUEUED, JobStatus.PENDING}:
                running[record.name] = job.id
        event = registry.last_event(record.id, EventKind.ALLOCATION)
        if event is None:
            continue
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
    views = []
    for node in SITE_NODES:
        # The parameter server serves every deployment updated across the nodes.
        ps = node.role == "parameter-server"
        serving = [r for r in live if node.name in r.spec.target.nodes
                   or (ps and r.spec.target.kind is TargetKind.NODES)]  # fmt: skip
        views.append(
            NodeView(
                name=node.name, device=node.device, role=node.role, state="up",
                emulated_utilisation={"cpu": node.cpu_util, "gpu": node.gpu_util,
                                      "mem": node.mem_util},
                deployments=[r.name for r in serving],
                canary=[r.name for r in serving
                        if r.canary_version is not None and node.name in r.spec.canary_nodes()],
                jobs=sorted(running[r.name] for r in serving if r.name in running),
                allocations=allocations.get(node.name, []),
            )
        )  # fmt: skip
    return json_response(NodeList(nodes=views))
