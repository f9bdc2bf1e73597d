"""``GET /v1/host``: the service host's measured state, and what the caller's jobs hold there.

A node's state is Deep-Edge's X = (cpu, gpu, mem): the 95th percentile of each utilisation
over the last :data:`STATE_WINDOW_S` seconds (:func:`deepedge.cluster.metrics.percentile_state`).
The service host is measured by a :class:`~deepedge.cluster.metrics.NodeAgent` that the
serving process starts on first use (after the supervisor's fork: threads do not survive
one). GPU utilisation is absent (``null``) on a host without an NVIDIA GPU, never a fake 0.

The site's (emulated) nodes and the deployments on them are ``GET /v1/nodes`` of the control
plane; this is the machine the service itself runs its learners on.

Tenant-scoped like every ``/v1`` route: the host's state is the site's, but its allocations
list only the caller's active jobs (:data:`~deepedge.service.status.ACTIVE`), each with
the cores, GPUs and memory its manifest reserves. ``data_plane`` is the data plane's
health as its host last reported it (starting, serving, retrying with the reason, failed).
"""

from __future__ import annotations

import os
import socket
import threading
import time

import anyio
import psutil
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict

from deepedge.api.dependencies import TenantDep, json_response, service_state
from deepedge.api.serving import DataPlaneView, data_plane_view
from deepedge.cluster.metrics import NodeAgent
from deepedge.service.manifest import JobManifest
from deepedge.service.records import JobRecord, TenantId
from deepedge.service.status import ACTIVE
from deepedge.service.store import JobStore

STATE_WINDOW_S = 10.0
SAMPLE_PERIOD_S = 0.5
MAX_ALLOCATIONS = 200

router = APIRouter(prefix="/v1", tags=["dashboard"])


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class NodeStateView(_Out):
    cpu_util: float
    mem_util: float
    gpu_util: float | None


class JobAllocation(_Out):
    """What one active job of the caller reserves (its manifest's resources x learners)."""

    job_id: str
    name: str
    kind: str
    status: str
    learners: int
    cpus: float
    gpus: int
    mem_mb: int


class HostView(_Out):
    id: str  # host name
    cpu_cores: int
    mem_mb: int
    has_gpu: bool
    state: NodeStateView | None  # None: no sample yet
    state_window_s: float
    allocations: list[JobAllocation]
    allocated_cpus: float
    allocated_gpus: int
    measured_at: float  # unix seconds
    data_plane: DataPlaneView | None = None  # its host's last report (api.serving)


class _HostAgent:
    """One node agent per serving process, started lazily (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._agent: NodeAgent | None = None
        self._pid = -1

    def get(self) -> NodeAgent:
        with self._lock:
            if self._agent is None or self._pid != os.getpid():
                self._agent = NodeAgent(SAMPLE_PERIOD_S, history_s=4 * STATE_WINDOW_S).start()
                self._pid = os.getpid()
            return self._agent


_HOST = _HostAgent()


def host_state() -> tuple[NodeStateView | None, bool]:
    """The host's state over the last window; None until the agent's first sample (the
    first request starts it: it answers at once rather than wait for one period)."""
    agent = _HOST.get()
    since_s = time.monotonic() - STATE_WINDOW_S
    if not agent.samples(since_s=since_s):
        return None, agent.has_gpu
    state = agent.state(since_s=since_s)
    view = NodeStateView(cpu_util=state.cpu_util, mem_util=state.mem_util, gpu_util=state.gpu_util)
    return view, agent.has_gpu


def allocations(store: JobStore, tenant_id: TenantId) -> list[JobAllocation]:
    """The caller's active jobs and what each reserves."""
    jobs: list[JobRecord] = []
    for status in sorted(ACTIVE):
        jobs += store.list_jobs(tenant_id, status, limit=MAX_ALLOCATIONS)
    out = []
    for job in sorted(jobs, key=lambda j: j.created_at):
        manifest = JobManifest.model_validate_json(job.manifest_json)
        out.append(
            JobAllocation(
                job_id=job.id,
                name=job.name,
                kind=str(job.kind),
                status=str(job.status),
                learners=manifest.learners,
                cpus=manifest.cores,
                gpus=manifest.gpus,
                mem_mb=manifest.resources.mem_mb * manifest.learners,
            )
        )
    return out


def host_view(store: JobStore, tenant_id: TenantId) -> HostView:
    """The service host seen by one tenant (blocking: call it off the event loop)."""
    state, has_gpu = host_state()
    held = allocations(store, tenant_id)
    return HostView(
        id=socket.gethostname(),
        cpu_cores=psutil.cpu_count() or 1,
        mem_mb=int(psutil.virtual_memory().total // (1 << 20)),
        has_gpu=has_gpu,
        state=state,
        state_window_s=STATE_WINDOW_S,
        allocations=held,
        allocated_cpus=sum(a.cpus for a in held),
        allocated_gpus=sum(a.gpus for a in held),
        measured_at=time.time(),
    )


@router.get("/host", response_model=HostView)
async def host(request: Request, tenant: TenantDep) -> Response:
    view = await anyio.to_thread.run_sync(host_view, service_state(request).store, tenant.id)
    return json_response(view.model_copy(update={"data_plane": data_plane_view(request)}))
