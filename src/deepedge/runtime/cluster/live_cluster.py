"""A model update's view of a live Ray cluster: specs from agent reports, and node loss.

:class:`LiveCluster` reads the node registry (:mod:`deepedge.runtime.cluster.node_agent`):

* :meth:`LiveCluster.refresh` rebuilds the update's :class:`ClusterSpec` from the latest
  reports of the ALIVE nodes (:func:`deepedge.planning.sharding.live_spec.cluster_spec`),
  keeping the update's own fields (``|M|``, numEpoch, epsilon, tau, margin). Every (re-)plan of
  :func:`deepedge.runtime.training.update.run_model_update` starts from it, so a re-plan after a
  node loss covers the surviving nodes only, and a lost PS node is replaced.
* :meth:`LiveCluster.lost` says which members of a launch sit on a node that is no
  longer alive, by the registry (heartbeats) or by Ray (the GCS marked the node dead);
  :meth:`LiveCluster.draining` which of them leave gracefully (DRAINING or LEFT in the
  registry: the update moves them without a strike).
* A ``ps_node`` that is not alive in the registry is refused when the view is made,
  naming the alive nodes (a typo would otherwise silently put the PS elsewhere).
* :meth:`LiveCluster.settle` waits, after a failure, until every node of the failed
  launch has either reported since or is lost, so the re-plan sees the loss.

:func:`live_planner` plans with the learned models of each device type when a models
directory covers every device type of the cluster, else with the analytic catalog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from deepedge.cluster.reports import NodeReport, NodeStatus, NodeView
from deepedge.core.errors import InvalidInputError, NotFoundError
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.perfmodel.fitted_model import LearnedPerformanceModel, load_performance_model
from deepedge.perfmodel.protocol import PerformanceModel
from deepedge.planning.sharding import Planner, shard_policy
from deepedge.planning.sharding.live_spec import cluster_spec
from deepedge.planning.sharding.plan import Policy
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.cluster.node_agent import registry

log = logging.getLogger(__name__)


class LiveCluster:
    """The registry's nodes as an update needs them (module docstring)."""

    def __init__(
        self,
        registry_handle: Any | None = None,
        *,
        ps_node: str | None = None,
        ps_candidates: Iterable[str] | None = None,
        workers: Iterable[str] | None = None,
        min_batch: int = 1,
        max_batch: int = 64,
    ) -> None:
        self._registry = registry_handle if registry_handle is not None else registry()
        self.ps_node = ps_node
        self.ps_candidates = None if ps_candidates is None else tuple(ps_candidates)
        self.workers = None if workers is None else tuple(workers)
        self.min_batch, self.max_batch = min_batch, max_batch
        self.lost_after_s = float(ray.get(self._registry.lost_after_s.remote()))
        if ps_node is not None:
            self._check_ps_node(ps_node)

    def _check_ps_node(self, ps_node: str) -> None:
        alive = sorted(r.node_id for r in self.alive())
        if ps_node in alive:
            return
        known = {v.report.node_id: v.status.value for v in self.views()}
        standing = f"it is {known[ps_node]}" if ps_node in known else "no agent reports as it"
        raise InvalidInputError(
            f"the parameter server's node {ps_node!r} (--ps-node, a job's ps_node) is not an "
            f"alive node of this cluster ({standing}); "
            f"alive: {', '.join(alive) or 'none'}",
            field="ps_node",
            alive=alive,
        )

    def views(self) -> list[NodeView]:
        views: list[NodeView] = ray.get(self._registry.views.remote())
        return views

    def alive(self) -> list[NodeReport]:
        dead = _dead_ray_nodes()
        return [
            v.report
            for v in self.views()
            if v.status is NodeStatus.ALIVE and v.report.ray_node_id not in dead
        ]

    def wait_for(self, node_ids: Iterable[str], timeout_s: float = 120.0) -> list[NodeReport]:
        """Block until every one of ``node_ids`` has reported and is alive."""
        wanted = set(node_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            reports = self.alive()
            if wanted <= {r.node_id for r in reports}:
                return reports
            if time.monotonic() > deadline:
                missing = ", ".join(sorted(wanted - {r.node_id for r in reports}))
                raise NotFoundError(f"no report from node(s) {missing} within {timeout_s} s")
            time.sleep(0.25)

    def spec(self, dataset_size: int, num_epochs: int = 1) -> ClusterSpec:
        """A ClusterSpec of the alive nodes (no hand-written cluster file)."""
        alive = self.alive()
        if not alive:
            raise NotFoundError(
                "no deepedge agent reports to this cluster: run `deepedge agent` on each device"
            )
        return cluster_spec(
            alive,
            dataset_size,
            ps_node=self.ps_node,
            ps_candidates=self.ps_candidates,
            workers=self.workers,
            num_epochs=num_epochs,
            min_batch=self.min_batch,
            max_batch=self.max_batch,
        )

    def refresh(self, base: ClusterSpec) -> ClusterSpec:
        """``base`` with its workers and PS replaced by the alive nodes' latest reports."""
        live = self.spec(base.dataset_size, base.num_epochs)
        return base.model_copy(
            update={"workers": live.workers, "parameter_server": live.parameter_server}
        )

    def lost(self, node_ids: Iterable[str]) -> set[str]:
        """Those of ``node_ids`` whose node is not alive (registry or Ray)."""
        ids = list(node_ids)
        alive = {r.node_id for r in self.alive()}
        return {n for n in ids if n not in alive}

    def draining(self, node_ids: Iterable[str]) -> set[str]:
        """Those of ``node_ids`` that leave gracefully (DRAINING or LEFT in the registry)."""
        graceful = {NodeStatus.DRAINING, NodeStatus.LEFT}
        status = {v.report.node_id: v.status for v in self.views()}
        return {n for n in node_ids if status.get(n) in graceful}

    def settle(self, node_ids: Iterable[str], failed_at_s: float) -> None:
        """Wait until each of ``node_ids`` reported after ``failed_at_s`` (time.monotonic
        here) or is lost; at most ``lost_after_s`` plus a second."""
        ids = set(node_ids)
        deadline = failed_at_s + self.lost_after_s + 1.0
        while time.monotonic() < deadline:
            elapsed = time.monotonic() - failed_at_s
            views = {v.report.node_id: v for v in self.views()}
            undecided = [
                n
                for n in ids
                if n in views
                and views[n].status is NodeStatus.ALIVE
                and views[n].age_s >= elapsed  # its last report predates the failure
            ]
            if not undecided:
                return
            time.sleep(0.1)


def _dead_ray_nodes() -> set[str]:
    """Ray node ids that the GCS has marked dead."""
    return {n["NodeID"] for n in ray.nodes() if not n.get("Alive", False)}


def learned_models(root: Path | None) -> LearnedPerformanceModel | None:
    """The learned models under ``root`` (one sub-directory per device type), if any."""
    if root is None or not Path(root).is_dir():
        return None
    devices = {}
    for sub in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        try:
            devices.update(load_performance_model(sub, strict=True).devices)
        except InvalidInputError:
            continue
    return LearnedPerformanceModel(devices, strict=True) if devices else None


def performance_model_for(
    cluster: ClusterSpec, models_root: Path | None = None
) -> tuple[PerformanceModel, str]:
    """Learned models when they cover every device type of ``cluster``, else the catalog;
    with the name of the choice (``"learned"`` or ``"catalog"``)."""
    learned = learned_models(models_root)
    needed = {w.device.value for w in cluster.workers}  # the PS's state is a feature only
    if learned is not None and needed <= set(learned.devices):
        return learned, "learned"
    if learned is not None:
        log.info("learned models miss %s: planning on the catalog", needed - set(learned.devices))
    return DeviceCatalog(cluster.parameter_server.device), "catalog"


@dataclass(frozen=True)
class LiveEstimates:
    """The estimates of a live plan: :func:`performance_model_for` the cluster of the moment;
    ``on_choice`` hears which models each plan used (``"learned"`` or ``"catalog"``)."""

    models_root: Path | None = None
    on_choice: Callable[[str], None] | None = None

    def __call__(self, cluster: ClusterSpec) -> PerformanceModel:
        model, source = performance_model_for(cluster, self.models_root)
        log.info("planning %d workers on the %s models", len(cluster.workers), source)
        if self.on_choice is not None:
            self.on_choice(source)
        return model


def live_planner(
    models_root: Path | None = None, on_choice: Callable[[str], None] | None = None
) -> Planner:
    """Algorithm 1 on the learned models per device type, else on the catalog."""
    return Planner(shard_policy(Policy.DEEP_EDGE), LiveEstimates(models_root, on_choice))


def nodes_of_placements(
    placements: Iterable[Mapping[str, str | None]], views: Iterable[NodeView]
) -> list[dict[str, str | None]]:
    """Each launch's placement (member -> the Ray node id Ray's actor table gave,
    :attr:`deepedge.runtime.training.update.UpdateResult.placements`) as member -> deepedge node id
    (by the agents' Ray node ids; None: a node no agent runs on)."""
    by_ray = {v.report.ray_node_id: v.report.node_id for v in views}
    return [
        {member: by_ray.get(ray_id) if ray_id else None for member, ray_id in launch.items()}
        for launch in placements
    ]


def misplaced(launch: Mapping[str, str | None], ps_member: str) -> list[str]:
    """The workers of one launch (``member -> node id``) that did not run on their own node
    (a worker is named after its node); the PS may run on any node."""
    return [f"{m} ran on {n or 'a node without an agent'}"
            for m, n in launch.items() if m != ps_member and n != m]  # fmt: skip
