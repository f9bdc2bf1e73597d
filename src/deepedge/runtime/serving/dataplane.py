"""The data plane on Ray: Serve applications, the table they follow, the sample writer.

:func:`start_data_plane` (idempotent; run by the service when it starts, and again after
its Ray restarts) connects to the cluster, starts Ray Serve's HTTP proxy on this node's
loopback, and makes sure three detached actors run on the service's own node:

* :class:`~deepedge.runtime.serving.ingress.DataPlaneIngress` runs the data plane's own
  HTTP ingress on the data plane's address: HAProxy, which answers Ray Serve's own routes
  (``/-/routes``, which lists every served model, ``/-/healthz``, and any other path with
  a ``/-/`` segment) with the protocol's 404 and forwards every other request to Serve
  unchanged; Serve, its proxy and its replicas' HTTP servers listen on loopback only;

* :class:`DataPlaneController` polls the control plane's store for the serving table (a
  picklable ``source`` callable given by the control plane, so this module never imports
  it), answers the replicas' long polls (:meth:`~DataPlaneController.table_for`) and a
  copy's ask for the live keys as the store holds them now
  (:meth:`~DataPlaneController.live_keys`, the reads shared with its polls), and
  reconciles Serve: one application per served deployment (ingress
  :class:`~deepedge.runtime.serving.model_server.ModelServer` on ``/v2/models/<model>``, redeployed
  only when its replica shape or placement changes), deleted when the deployment stops;
  it also follows the live nodes (:meth:`~DataPlaneController.alive_nodes`: Ray's alive
  nodes by their ``deepedge-node:`` resource, less those the node registry does not call
  alive, a draining node included) and keeps every deployment's replicas on them: a
  deployment with a placement is served by replica groups (an application each, see
  :mod:`deepedge.runtime.serving.serve_apps`) behind a
  :class:`~deepedge.runtime.serving.camera_router.CameraRouter` that stays, re-placed off a lost or
  draining node (:func:`deepedge.dataplane.replica_groups.replace`) by starting the new
  groups, routing the router to them once they run (:meth:`~DataPlaneController.plan_for`)
  and only then deleting the old ones (:mod:`deepedge.dataplane.group_moves`); any other
  deployment is pinned to the first alive node of its target (anywhere when none of its
  nodes is a live node: the emulated site). Every re-placement is kept with its cause
  (:meth:`~DataPlaneController.decisions`) and appended to the site's journal of serving
  decisions (:mod:`deepedge.dataplane.serving_decisions`), which the control loop records
  as the deployment's ``move`` events;
* :class:`SampleWriter` appends sampled requests and feedback labels to the site's
  :class:`~deepedge.dataplane.sample_store.SampleStore` on this node's disk, with the
  replicas' traffic figures and the ingress's (each model's latency as a client sees it).

All three restart on their own (``max_restarts=-1``) from their constructor's arguments;
a restarted controller rebuilds its state from the store and from Serve's own status. The
front application (:class:`~deepedge.runtime.serving.front.Front`, on ``/``) answers the
server-wide routes: ``GET /v2``, ``/v2/health/live`` (``{"live": true}``),
``/v2/health/ready`` (``{"ready": true}``), and any path nothing else serves (a model name
nothing serves; ``/``, ``//v2/...``): 401 or 404 in the protocol's error form, and 503
starting (with ``Retry-After``) to the key of a served model whose application Serve is
still deploying (:mod:`deepedge.dataplane.front`). Ray Serve's own ``GET /-/routes`` (and
``/-/healthz``), which its proxy answers before any application sees the request, never
reaches it from the data plane's address: the ingress answers them (docs/DESIGN.md).

Nothing here is touched by the API or the manager on a request's path: they can crash and
restart while Serve answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve.api import RunTarget
from ray.serve.schema import ApplicationStatus

from deepedge.core.errors import (
    InfeasibleError,
    IngressUnavailableError,
)
from deepedge.dataplane.fresh_reads import FreshReads
from deepedge.dataplane.group_moves import GroupMove, advance, plan_revision, settled, wanted
from deepedge.dataplane.ingress_traffic import IngressRow
from deepedge.dataplane.keys import KeyGrant
from deepedge.dataplane.model_reports import TrafficTotals
from deepedge.dataplane.replica_groups import GroupPlan, plan_document, replace
from deepedge.dataplane.sample_store import Feedback, Retention, Sample, SampleStore, TrafficRow
from deepedge.dataplane.serving_decisions import DecisionJournal, ServingDecision
from deepedge.dataplane.serving_table import ModelRoute, ServingTable
from deepedge.runtime.cluster.session import (
    NODE_RESOURCE_PREFIX,
    driver_node_options,
    ensure_ray,
    is_loopback_host,
)
from deepedge.runtime.serving.camera_router import (
    GROUP_APP_PREFIX,
    group_app,
    group_apps_prefix,
)
from deepedge.runtime.serving.front import Front
from deepedge.runtime.serving.ingress import (
    LOOPBACK,
    DataPlaneIngress,
    loopback_port,
)
from deepedge.runtime.serving.ingress_log import WriterSink
from deepedge.runtime.serving.serve_apps import (
    APP_PREFIX,
    CONTROLLER,
    INGRESS,
    NAMESPACE,
    WRITER,
    app_name,
    deployment_fingerprint,
    group_application,
    group_fingerprint,
    model_app,
    router_app,
)

log = logging.getLogger(__name__)

FRONT_APP = "deepedge-front"
# Every path no deployment's route takes: unknown models, and anything else the proxy would
# answer with its own plain-text 404
FRONT_ROUTE = "/"
TABLE_POLL_S = 0.25  # (an unchanged store costs one small query a poll)
TABLE_READ_GAP_S = 0.1  # the store is read at most this often (polls and live_keys together)
ALIVE_CHECK_S = 1.0  # the live nodes are read from Ray and the registry at most this often
ALIVE = "alive"  # the registry's status of a placeable node (any other is not placeable)
DECISIONS_KEPT = 200  # the newest serving decisions a controller holds in memory


@dataclass(frozen=True)
class DataPlaneAddress:
    """Where the data plane answers (its ingress, in front of Ray Serve)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class SampleWriter:
    """The one writer of the site's sample store (module docstring)."""

    def __init__(self, path: str) -> None:
        self.store = SampleStore(Path(path))

    def ping(self) -> int:
        return os.getpid()

    def append(self, deployment: str, samples: Sequence[Sample], retention: Retention) -> int:
        return self.store.append(deployment, samples, retention)

    def label_batch(self, deployment: str, labels: Sequence[Feedback], source: str
                    ) -> list[str]:  # fmt: skip
        return self.store.label_batch(deployment, labels, source)

    def record_traffic(self, rows: Sequence[TrafficRow]) -> None:
        self.store.record_traffic(rows)

    def traffic_totals(self, deployment: str) -> TrafficTotals:
        return self.store.traffic_totals(deployment)

    def record_ingress(self, rows: Sequence[IngressRow], covered: Sequence[int]) -> None:
        self.store.record_ingress(rows, covered)


@dataclass
class ServedModelState:
    """What the controller knows of one served model: its one state object."""

    fingerprint: str | None = None  # of its application as deployed (None: not deployed)
    plan: tuple[GroupPlan, GroupPlan] | None = None  # (decided, served: moved off lost nodes)
    pin: str | None = None  # the node its replicas are pinned to (unplaced models)
    move: GroupMove | None = None  # the plan its router follows, and any move under way
    reported: str | None = None  # the plan revision its router last reported following
    groups: dict[str, str] = field(default_factory=dict)  # group app -> its fingerprint

    def retire_groups(self) -> list[str]:
        """Its group applications, forgotten (the caller deletes them)."""
        names, self.groups = list(self.groups), {}
        return names


class DataPlaneController:
    """The serving table and the Serve applications (module docstring)."""

    def __init__(
        self, source: Callable[[], ServingTable], poll_s: float = TABLE_POLL_S,
        decisions_path: str | None = None,
    ) -> None:  # fmt: skip
        self._source = source
        self._poll_s = poll_s
        self._table = ServingTable({}, {}, "")
        self._reads = FreshReads(self._read_table, TABLE_READ_GAP_S)
        self._changed: asyncio.Event | None = None
        self._models: dict[str, ServedModelState] = {}  # model -> its state
        self._adopted = False  # whether the applications Serve ran before were taken in
        self._lock = threading.Lock()
        self._poller: asyncio.Task[None] | None = None
        self.errors: list[str] = []
        self._alive: frozenset[str] = frozenset()
        self._alive_at = float("-inf")
        self._journal = DecisionJournal(Path(decisions_path) if decisions_path else None)
        self._decisions: list[ServingDecision] = self._journal.tail(DECISIONS_KEPT)
        self._moved: asyncio.Event | None = None  # set (then replaced) when a router's plan moves

    def _model(self, model: str) -> ServedModelState:
        return self._models.setdefault(model, ServedModelState())

    def _routed_revisions(self) -> dict[str, str]:
        return {m: s.move.revision for m, s in self._models.items() if s.move is not None}

    def ping(self) -> int:
        return os.getpid()

    def configure(self, source: Callable[[], ServingTable], poll_s: float,
                  decisions_path: str | None = None) -> None:  # fmt: skip
        """A restarted service may bring another store (a new database URL) and data folder."""
        self._source, self._poll_s = source, poll_s
        path = Path(decisions_path) if decisions_path else None
        if path != self._journal.path:
            journal = DecisionJournal(path)
            self._journal, self._decisions = journal, journal.tail(DECISIONS_KEPT)

    async def table_for(
        self, model: str, known_revision: str, wait_s: float
    ) -> tuple[ModelRoute | None, dict[str, KeyGrant], str]:
        """The model's route and the live keys; waits up to ``wait_s`` for a revision other
        than ``known_revision`` (a long poll)."""
        table = await self._table_after(known_revision, wait_s)
        return table.routes.get(model), table.keys, table.revision

    async def front_table(
        self, known_revision: str, wait_s: float
    ) -> tuple[dict[str, KeyGrant], dict[str, KeyGrant], str]:
        """The front application's table: each routed model's owner, and the live keys
        (the same long poll as :meth:`table_for`)."""
        table = await self._table_after(known_revision, wait_s)
        owners = {m: KeyGrant(r.deployment_id, r.tenant_id) for m, r in table.routes.items()}
        return owners, table.keys, table.revision

    async def live_keys(self) -> dict[str, KeyGrant]:
        """The live keys as the store holds them now: from a read begun after this call
        came (:class:`deepedge.dataplane.keys.KeyCheck`'s ask before a copy refuses a key)."""
        self._ensure_polling()
        await self._refresh()
        return self._table.keys

    async def _table_after(self, known_revision: str, wait_s: float) -> ServingTable:
        self._ensure_polling()
        if self._table.revision == "":
            await self._refresh()
        if wait_s > 0 and known_revision == self._table.revision:
            assert self._changed is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait_s)
        return self._table

    async def plan_for(
        self, model: str, known_revision: str, wait_s: float
    ) -> tuple[GroupPlan | None, str]:
        """The plan ``model``'s camera router is to follow and its revision; waits up to
        ``wait_s`` for a revision other than ``known_revision`` (a long poll). The known
        revision is the router's report that it follows that plan
        (:func:`~deepedge.dataplane.group_moves.settled`)."""
        self._ensure_polling()
        self._model(model).reported = known_revision
        deadline = time.monotonic() + wait_s
        while True:
            state = self._models.get(model)
            move = state.move if state is not None else None
            revision = move.revision if move is not None else ""
            left_s = deadline - time.monotonic()
            if revision != known_revision or left_s <= 0:
                return (move.routed if move is not None else None), revision
            assert self._moved is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left_s)

    async def revision(self) -> str:
        self._ensure_polling()
        return self._table.revision

    async def deployed(self) -> dict[str, str]:
        return {m: s.fingerprint for m, s in self._models.items() if s.fingerprint is not None}

    async def decisions(self) -> list[ServingDecision]:
        """The newest re-placements (``DECISIONS_KEPT``, the journal's across restarts),
        oldest first."""
        return list(self._decisions)

    async def placements(self) -> dict[str, GroupPlan]:
        """The replica groups each placed deployment is served by now (the plan its router
        follows; during a move, the plan it moves to is :meth:`targets`')."""
        return {m: s.move.routed for m, s in self._models.items() if s.move is not None}

    async def targets(self) -> dict[str, GroupPlan]:
        """The replica groups each placed deployment is to be served by (its decision moved
        off the nodes not alive)."""
        return {m: s.plan[1] for m, s in self._models.items() if s.plan is not None}

    def alive_nodes(self) -> frozenset[str]:
        """The deepedge nodes replicas may be placed on now (module docstring)."""
        now = time.monotonic()
        if now - self._alive_at < ALIVE_CHECK_S:
            return self._alive
        alive = {
            key[len(NODE_RESOURCE_PREFIX) :]
            for node in ray.nodes()
            if node.get("Alive")
            for key in node.get("Resources", {})
            if key.startswith(NODE_RESOURCE_PREFIX)
        }
        self._alive, self._alive_at = frozenset(alive - _not_placeable()), now
        return self._alive

    def _ensure_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._changed = asyncio.Event()
            self._moved = asyncio.Event()
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            routed = self._routed_revisions()
            try:
                await self._refresh()
                await asyncio.to_thread(self._reconcile, self._table)
            except Exception as exc:
                log.warning("data-plane controller: %s", exc)
                self.errors = [*self.errors[-19:], f"{time.time():.0f} {exc}"]
            if routed != self._routed_revisions():
                assert self._moved is not None
                self._moved.set()  # (the long polls of plan_for wake up on this loop)
                self._moved = asyncio.Event()
            await asyncio.sleep(self._poll_s)

    async def _refresh(self) -> None:
        """The table as of now (one read at a time: a table applied is never older)."""
        await self._reads.fresh(time.monotonic())

    async def _read_table(self) -> ServingTable:
        table = await asyncio.to_thread(self._source)
        if table.revision != self._table.revision:
            self._table = table
            assert self._changed is not None
            self._changed.set()
            self._changed = asyncio.Event()
        return table

    def _reconcile(self, table: ServingTable) -> None:
        """Serve applications for the table's routes: new or reshaped ones deployed (without
        waiting for them to run), those of deployments no longer served deleted. A placed
        deployment is its router's application, deployed once, and one application per
        replica group, moved by :meth:`_move_groups`."""
        with self._lock:
            if not self._adopted:
                self._adopt(serve.status().applications, table)
                self._adopted = True
            targets: list[RunTarget] = []
            retired: list[str] = []
            alive = self.alive_nodes()
            for model, route in table.routes.items():
                plan = self._placed(model, route, alive)
                pin = None if plan is not None else self._pinned(model, route, alive)
                state = self._model(model)
                if plan is None:
                    state.move = None
                    retired += state.retire_groups()
                else:
                    moved, left = self._move_groups(model, route, plan, _running_apps,
                                                    time.monotonic())  # fmt: skip
                    targets += moved
                    retired += left
                fingerprint = deployment_fingerprint(route, plan, pin)
                if state.fingerprint != fingerprint:
                    app = model_app(model, route, pin) if plan is None else router_app(model)
                    targets.append(RunTarget(app, name=app_name(model),
                                             route_prefix=f"/v2/models/{model}"))  # fmt: skip
                    state.fingerprint = fingerprint
            if targets:
                serve.run_many(targets, wait_for_ingress_deployment_creation=False,
                               wait_for_applications_running=False)  # fmt: skip
            gone = [m for m, s in self._models.items()
                    if s.fingerprint is not None and m not in table.routes]  # fmt: skip
            for model in sorted(gone):
                serve.delete(app_name(model), _blocking=False)
                retired += self._models.pop(model).retire_groups()
            for name in retired:
                serve.delete(name, _blocking=False)

    def _adopt(self, status: dict[str, Any], table: ServingTable) -> None:
        """A controller's first reconcile: the applications Serve runs already (this
        controller restarted) are taken as deployed with an unknown fingerprint; a group
        application of a deployment no longer served is deleted."""
        for name in (n for n in status if n.startswith(APP_PREFIX)):
            self._model(name[len(APP_PREFIX) :]).fingerprint = "?"
        for name in (n for n in status if n.startswith(GROUP_APP_PREFIX)):
            model = next((m for m in table.routes if name.startswith(group_apps_prefix(m))),
                         None)  # fmt: skip
            if model is None:
                serve.delete(name, _blocking=False)
            else:
                self._model(model).groups[name] = "?"

    def _move_groups(
        self, model: str, route: ModelRoute, target: GroupPlan,
        running: Callable[[], set[str]], now_s: float,
    ) -> tuple[list[RunTarget], list[str]]:  # fmt: skip
        """The group applications to (re)deploy and those to delete for ``target``
        (:mod:`deepedge.dataplane.group_moves`): the router is switched to ``target`` once
        its groups run (their applications deployed as wanted and among ``running``), and
        the groups it left are deleted once it has switched."""
        state = self._model(model)
        deployed, move = state.groups, state.move
        ready: set[str] = set()
        if move is not None and plan_revision(target) != move.revision:
            apps = running()
            ready = {g.name for g in target.groups
                     if deployed.get(group_app(model, g)) == group_fingerprint(route, g)
                     and group_app(model, g) in apps}  # fmt: skip
        after = state.move = advance(move, target, ready, now_s)
        if move is not None and after.revision != move.revision:
            log.warning("data plane: %s routed to its groups %s", model,
                        ", ".join(g.name for g in target.groups))  # fmt: skip
        runs = []
        for g in wanted(after, target):
            name, fingerprint = group_app(model, g), group_fingerprint(route, g)
            if deployed.get(name) != fingerprint:
                runs.append(
                    RunTarget(group_application(model, route, g), name=name, route_prefix=None)
                )
                deployed[name] = fingerprint
        left: list[str] = []
        if settled(after, state.reported, now_s):
            keep = {group_app(model, g) for g in wanted(after, target)}
            left = sorted(set(deployed) - keep)
            for name in left:
                del deployed[name]
        return runs, left

    def _placed(self, model: str, route: ModelRoute, alive: frozenset[str]) -> GroupPlan | None:
        """The groups ``model`` is served by: its decided placement, moved off the nodes
        not alive (the moves kept sticky while the decision stands)."""
        state = self._model(model)
        if route.groups is None:
            state.plan = None
            return None
        decided, served = state.plan or (None, None)
        current = served if decided == route.groups and served is not None else route.groups
        try:
            result = replace(current, alive)
        except InfeasibleError as exc:  # nowhere to go: keep the groups, pending, and say so
            self._decide(model, route.deployment_id, str(exc),
                         tuple(sorted(current.nodes - alive)),
                         plan_document(current), plan_document(current))  # fmt: skip
            result_plan = current
        else:
            result_plan = result.plan
            if result.moved:
                self._decide(model, route.deployment_id, result.plan.cause,
                             tuple(sorted(result.lost)),
                             plan_document(current), plan_document(result.plan))  # fmt: skip
        state.plan = (route.groups, result_plan)
        return result_plan

    def _pinned(self, model: str, route: ModelRoute, alive: frozenset[str]) -> str | None:
        """The first alive node of the target's (None: none of them is a live node)."""
        pin = next((n for n in route.shape.nodes if n in alive), None)
        state = self._model(model)
        before = state.pin
        if before is not None and before != pin:
            lost = () if before in alive else (before,)
            cause = (f"node {before} not alive: " if lost else "") + (
                f"replicas moved to {pin}"
                if pin
                else "no node of the target is alive: replicas placed anywhere"
            )
            self._decide(model, route.deployment_id, cause, lost, {"node": before},
                         {"node": pin})  # fmt: skip
        state.pin = pin
        return pin

    def _decide(self, model: str, deployment_id: str, cause: str, lost: tuple[str, ...],
                before: dict[str, Any], after: dict[str, Any]) -> None:  # fmt: skip
        last = next((d for d in reversed(self._decisions) if d.model == model), None)
        if last is not None and (last.cause, last.before, last.after) == (cause, before, after):
            return  # (the same standing decision, seen again on a later poll or restart)
        log.warning("data plane: %s re-placed: %s", model, cause)
        decision = self._journal.append(deployment_id, model, time.time(), cause, lost, before,
                                        after)  # fmt: skip
        self._decisions = [*self._decisions[-(DECISIONS_KEPT - 1) :], decision]


def _running_apps() -> set[str]:
    """The Serve applications running now (every replica up and healthy)."""
    return {name for name, app in serve.status().applications.items()
            if app.status == ApplicationStatus.RUNNING}  # fmt: skip


def _not_placeable() -> set[str]:
    """The nodes the registry knows and calls anything but alive (lost, left, draining);
    none without a registry (a cluster without agents)."""
    from deepedge.runtime.cluster.node_agent import NAMESPACE as REGISTRY_NAMESPACE
    from deepedge.runtime.cluster.node_agent import REGISTRY_NAME

    try:
        registry = ray.get_actor(REGISTRY_NAME, namespace=REGISTRY_NAMESPACE)
        views: Any = ray.get(registry.views.remote(), timeout=2.0)
    except Exception:  # no registry here, or it is restarting: Ray's view alone
        return set()
    return {v.report.node_id for v in views if getattr(v.status, "value", v.status) != ALIVE}


def start_data_plane(
    address: str | None,
    serve_address: DataPlaneAddress,
    source: Callable[[], ServingTable],
    samples_path: Path,
    poll_s: float = TABLE_POLL_S,
    decisions_path: Path | None = None,
) -> None:
    """Make the data plane run on the cluster at ``address`` (idempotent; module docstring).
    This process only sets it up: it may exit afterwards and everything keeps running. The
    controller appends its decisions to the journal at ``decisions_path`` (on this node's
    disk; None: kept in its memory only). Raises :class:`IngressUnavailableError` when
    the ingress cannot listen at ``serve_address`` (HAProxy's reason)."""
    ensure_ray(address=address)
    upstream = _serve_on_loopback()
    here = driver_node_options()["scheduling_strategy"]  # this node: the store's disk
    common = {"namespace": NAMESPACE, "lifetime": "detached", "get_if_exists": True,
              "max_restarts": -1, "num_cpus": 0, "scheduling_strategy": here}  # fmt: skip
    ingress_actor: Any = ray.remote(DataPlaneIngress)
    public = (serve_address.host, serve_address.port, upstream)
    ingress = ingress_actor.options(name=INGRESS, max_concurrency=4, **common)
    ingress = ingress.remote(*public, sink=WriterSink())
    problem = ray.get(ingress.configure.remote(*public))
    if problem:
        raise IngressUnavailableError(f"the data plane's ingress at {serve_address.url}: "
                                      f"{problem}", address=serve_address.url)  # fmt: skip
    writer_actor: Any = ray.remote(SampleWriter)
    controller_actor: Any = ray.remote(DataPlaneController)
    writer = writer_actor.options(name=WRITER, **common).remote(str(samples_path))
    journal = str(decisions_path) if decisions_path is not None else None
    controller = controller_actor.options(name=CONTROLLER, max_concurrency=1000, **common).remote(
        source, poll_s, journal
    )
    ray.get([writer.ping.remote(), controller.ping.remote()])
    ray.get(controller.configure.remote(source, poll_s, journal))
    ray.get(controller.revision.remote())  # starts its polling and reconciling
    front_class: Any = serve.deployment(Front)
    front = front_class.options(name="Front", num_replicas=1, ray_actor_options={"num_cpus": 0})
    serve.run_many(
        [RunTarget(front.bind(), name=FRONT_APP, route_prefix=FRONT_ROUTE)],
        wait_for_ingress_deployment_creation=False,
        wait_for_applications_running=False,
    )


def _serve_on_loopback() -> int:
    """Serve's HTTP port, on this node's loopback behind the ingress: Serve started there
    on a free port, or the one it runs on already (it must be on loopback too)."""
    from ray.serve.context import _get_global_client  # (Serve's options as they are)

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        serve.start(
            http_options={"host": LOOPBACK, "port": loopback_port()},
            logging_config={"enable_access_log": False, "log_level": "WARNING"},
        )
        client = _get_global_client()
    assert client is not None  # (Serve's own call raises when there is no Serve)
    http = client.http_config
    if not is_loopback_host(str(http.host)):
        raise IngressUnavailableError(
            f"Ray Serve already listens on {http.host}:{http.port}, off loopback: its own "
            "routes (/-/routes names every served model) would be open there",
            address=f"{http.host}:{http.port}",
        )
    return int(http.port)


def controller_revision(timeout_s: float = 10.0) -> str:
    """The serving table's revision the controller holds (for tests and benchmarks)."""
    controller = ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    revision: Any = ray.get(controller.revision.remote(), timeout=timeout_s)
    return str(revision)
