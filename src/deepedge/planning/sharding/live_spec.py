"""A live cluster's ClusterSpec, built from the node agents' reports.

:func:`cluster_spec` turns the latest reports of the ALIVE nodes
(:class:`~deepedge.cluster.reports.NodeReport`) into the
:class:`~deepedge.planning.sharding.spec.ClusterSpec` that the planners read: the PS node
(given, else the least-loaded node) hosts the parameter server, every other alive node is a
candidate worker named after its node id.
"""

from __future__ import annotations

from collections.abc import Iterable

from deepedge.cluster.reports import NodeReport
from deepedge.core.errors import NotFoundError
from deepedge.planning.sharding.spec import (
    BackgroundApp,
    ClusterSpec,
    ParameterServerSpec,
    StateSpec,
    WorkerSpec,
)


def _state_spec(report: NodeReport) -> StateSpec:
    """The report's state, made consistent with its device type (a GPU-less host that
    calls itself a GPU device reports gpu 0; a GPU reading on a CPU-only type is dropped)."""
    s = report.state
    gpu = s.gpu_util
    if report.device.has_gpu and gpu is None:
        gpu = 0.0
    if not report.device.has_gpu:
        gpu = None
    return StateSpec(cpu_util=s.cpu_util, mem_util=s.mem_util, gpu_util=gpu)


def choose_ps_node(reports: Iterable[NodeReport], ps_node: str | None = None) -> str:
    """``ps_node`` when it is alive, else the node with the lowest CPU use (ties: id)."""
    reports = list(reports)
    if not reports:
        raise NotFoundError("no alive node to host the parameter server")
    ids = {r.node_id for r in reports}
    if ps_node is not None and ps_node in ids:
        return ps_node
    return min(reports, key=lambda r: (r.state.cpu_util, r.node_id)).node_id


def cluster_spec(
    reports: Iterable[NodeReport],
    dataset_size: int,
    *,
    ps_node: str | None = None,
    ps_candidates: Iterable[str] | None = None,
    workers: Iterable[str] | None = None,
    num_epochs: int = 1,
    min_batch: int = 1,
    max_batch: int = 64,
) -> ClusterSpec:
    """The ClusterSpec of the alive nodes' latest ``reports`` (module docstring).

    ``ps_candidates`` restricts where the PS may go (default: any node); ``workers``
    restricts the candidate workers (default: every node but the PS node).
    """
    by_id = {r.node_id: r for r in reports}
    hosts = [r for r in by_id.values() if ps_candidates is None or r.node_id in set(ps_candidates)]
    ps_id = choose_ps_node(hosts, ps_node)
    allowed = None if workers is None else set(workers)
    chosen = [
        r
        for r in sorted(by_id.values(), key=lambda r: r.node_id)
        if r.node_id != ps_id and (allowed is None or r.node_id in allowed)
    ]
    if not chosen:
        raise NotFoundError("no alive node left to train on besides the parameter server's")
    ps = by_id[ps_id]
    return ClusterSpec(
        workers=[
            WorkerSpec(
                id=r.node_id,
                device=r.device,
                state=_state_spec(r),
                mem_capacity_mb=r.mem_capacity_mb,
                min_batch=min_batch,
                max_batch=max_batch,
                background_apps=[
                    BackgroundApp(name=a.name, kind=a.kind, deadline_s=a.deadline_s) for a in r.apps
                ],
            )
            for r in chosen
        ],
        parameter_server=ParameterServerSpec(device=ps.device, state=_state_spec(ps), node=ps_id),
        dataset_size=dataset_size,
        num_epochs=num_epochs,
    )
