"""The control plane: every deployment's continuous-learning loop, reconciled each tick.

One thread in the manager process runs :meth:`ControlPlane.tick`; all state is in the
store, so a restarted service carries on (level-triggered, like the job manager). Each
tick first records the data plane's new moves as their deployments' ``move`` events
(:mod:`deepedge.controlplane.serving_moves`), then advances every deployment that is not
stopped, each on its own (a pool of ``step_workers`` threads): one deployment whose
tenant code is slow (a labeller that sleeps, a big export) never delays another's windows;
its next step waits until its current one ended::

    progress -> a version on its way (:mod:`deepedge.controlplane.updates`): its update job
                submitted (``model-update``, or its edge server's joint ``ekya-window``,
                :mod:`deepedge.controlplane.edge_server_window`), followed, its result
                registered, exported, gated; an operator's upload loaded and gated; a first
                version trained off the loop (:mod:`deepedge.controlplane.first_versions`)
    window   -> when the next window is due: its labelled sample scored
                (:mod:`deepedge.controlplane.window_scores`), then the pure decision of
                :func:`deepedge.controlplane.transitions.window` (rollback, the canary's
                verdict, the trigger; on a drift, a kept version that fits serves again)
                committed with its evidence, and a new version's job submitted at once

Every decision is one :class:`~deepedge.controlplane.deployments.Step` committed with its
events in one compare-and-set transaction.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deepedge.controlplane.deployments import DeploymentStore, Step
from deepedge.controlplane.disagreement import (
    inputs_moved,
    needs_census,
    take_canary_census,
    take_census,
    with_census,
)
from deepedge.controlplane.edge_server_window import EdgeServerWindows, server_of
from deepedge.controlplane.evidence import paired_from_counts
from deepedge.controlplane.first_versions import FirstVersions, register_first
from deepedge.controlplane.placement_jobs import advance_placement
from deepedge.controlplane.records import (
    DeploymentId,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
)
from deepedge.controlplane.recovery import LEVEL_HORIZON_WINDOWS, recovery_under_way
from deepedge.controlplane.recurring import looks_like_kept
from deepedge.controlplane.rollout_status import LIVE_VERSIONS, DeploymentStatus, VersionStatus
from deepedge.controlplane.serving import admissions, serving_capacity
from deepedge.controlplane.serving_capacity import Admission, Demand, serving_cores
from deepedge.controlplane.serving_moves import MoveRecorder
from deepedge.controlplane.transitions import Policy, catch_up_end, window
from deepedge.controlplane.updates import Updates
from deepedge.controlplane.window_edges import (
    MOVED_CHECK_S,
    MOVED_WINDOW_SHARE,
    follows_a_move,
    moved_end,
    moved_look,
    moved_whole_end,
    window_start,
)
from deepedge.controlplane.window_scores import (
    kept_versions,
    score_kept,
    score_window,
    window_facts,
)
from deepedge.core.errors import (
    ConflictError,
    DeepEdgeError,
    IllegalTransitionError,
    NotFoundError,
)
from deepedge.dataplane.serving_decisions import decisions_path
from deepedge.service.config import ServiceSettings
from deepedge.service.records import TenantId
from deepedge.service.store import JobStore
from deepedge.service.workspace import Workspace

if TYPE_CHECKING:
    from deepedge.controlplane.site import Site

log = logging.getLogger(__name__)

D, V = DeploymentStatus, VersionStatus
TICK_WAIT_S = 1.0  # how long a tick waits for its deployments' steps before moving on
UNDECIDED_REPEAT_WINDOWS = 12  # an undecided streak is said again after this many windows


class ControlPlane:
    def __init__(
        self,
        store: JobStore,
        settings: ServiceSettings,
        tick_lock: threading.Lock | None = None,
        wake_manager: Callable[[], None] | None = None,
        first_versions_inline: bool = False,
        step_workers: int = 0,
    ) -> None:
        """``tick_lock`` is held by the job manager around its ticks: a job is submitted
        and its files staged under it, so the manager never deploys a half-staged job.
        ``step_workers`` threads advance the deployments, each on its own (0: one after
        the other in the tick, deterministic for tests that inject time); first versions
        train in a background thread, or, ``first_versions_inline``, in the tick itself,
        one per tick."""
        self.store = store
        self.deployments = DeploymentStore(store)
        self.settings = settings
        self.workspace = Workspace(settings.data_dir)
        self.tick_lock = tick_lock or threading.Lock()
        self.wake_manager = wake_manager or (lambda: None)
        self._site: Site | None = None
        self._site_lock = threading.Lock()
        self.updates = Updates(store, settings, self.site, self.tick_lock, self.wake_manager)
        self.edge = EdgeServerWindows(self.updates)
        self.updates.edge = self.edge
        self.first = FirstVersions(self.site, self.artifact, first_versions_inline)
        self.moves = MoveRecorder(self.deployments, decisions_path(settings.data_dir))
        self._first_inline = first_versions_inline
        self._workers = step_workers
        self._pool: ThreadPoolExecutor | None = None
        self._steps: dict[str, Future[None]] = {}  # deployment id -> its step under way
        self._due_lock = threading.Lock()
        self._first_due: list[tuple[DeploymentRecord, ModelVersion]] = []
        self._edge_due: set[tuple[TenantId, str]] = set()
        self._moved_checked: dict[str, float] = {}  # deployment id -> its inputs' last test
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def artifact(self, deployment: DeploymentRecord, number: int) -> Path:
        return self.updates.artifact(deployment, number)

    def site(self) -> Site:
        with self._site_lock:
            if self._site is None:
                from deepedge.controlplane.site import Site
                from deepedge.controlplane.tenant_workload import TenantWorkloads
                from deepedge.service.sandbox_run import SandboxRunner

                runner = SandboxRunner.for_service(self.settings)
                self._site = Site(self.settings.data_dir,
                                  TenantWorkloads(runner, self.store.tenant))  # fmt: skip
            return self._site

    # -- the thread -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="deepedge-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.first.stop()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(time.time())
            except Exception:
                log.exception("control-plane tick failed")
            self._stop.wait(self.settings.control_tick_s)

    # -- a tick ---------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """The data plane's new moves recorded as events first (:class:`MoveRecorder`); then
        every deployment's step (its own, on the pool: a slow one is left running and skipped
        until it ends); then the first versions due: registered once their weights are
        trained (in the background, or inline: at most one per tick, after every due
        window); then one window per edge server whose deployments wait for an update."""
        with self._due_lock:
            self._first_due, self._edge_due = [], set()
        try:
            self.moves.record()
        except Exception:
            log.exception("control plane failed to record the data plane's moves")
        try:
            self._record_admissions()
        except Exception:
            log.exception("control plane failed to record the data plane's admissions")
        self._advance_all(now)
        with self._due_lock:
            first_due, edge_due = list(self._first_due), sorted(self._edge_due)
        for deployment, version in first_due[:1] if self._first_inline else first_due:
            self._guarded(deployment, functools.partial(self._first, deployment, version, now))
        # Last: every deployment of a server that triggered in this tick joins its window.
        for tenant_id, server in edge_due:
            try:
                self.edge.submit(tenant_id, server, now)
            except (ConflictError, NotFoundError) as exc:
                log.info("edge server %s changed under the loop (%s)", server, exc)
            except Exception:
                log.exception("control plane failed on edge server %s", server)

    def admissions(self) -> tuple[list[Demand], dict[str, Admission]]:
        """Which live deployments the data plane serves within their tenants' quotas and
        its capacity (:mod:`deepedge.controlplane.serving_capacity`)."""
        return admissions(self.store, self.deployments.live(), *serving_capacity(self.settings))

    def serving_cores(self, tenant_id: str) -> tuple[float, float]:
        """The cores and GPUs a tenant's deployments serve with (its jobs get the rest of
        its quota)."""
        if not self.settings.serving:
            return 0.0, 0.0
        demands, admitted = self.admissions()
        return serving_cores(demands, admitted, tenant_id)

    def _record_admissions(self) -> None:
        """A deployment's ``serving`` event when the data plane starts or stops waiting to
        serve it (said once per change, with the reason)."""
        if not self.settings.serving:
            return
        demands, admitted = self.admissions()
        for demand in demands:
            verdict = admitted[demand.deployment_id]
            deployment_id = DeploymentId(demand.deployment_id)
            last = self.deployments.last_event(deployment_id, EventKind.SERVING)
            state = "admitted" if verdict.admitted else "waiting"
            if last is None and verdict.admitted:
                continue  # served from the start: nothing to say
            if (
                last is not None
                and last.detail.get("state") == state
                and (verdict.admitted or last.message == verdict.reason)
            ):
                continue
            message = verdict.reason or "the data plane serves it now (capacity freed)"
            event = Event(EventKind.SERVING, message, detail={"state": state})
            current = self.deployments.get_by_id(deployment_id)
            self.deployments.commit(current, Step(events=(event,)))

    def _advance_all(self, now: float) -> None:
        live = self.deployments.live()
        if self._workers <= 0:
            for deployment in live:
                self._guarded(deployment, functools.partial(self.advance, deployment, now))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="deployment")
        started: list[Future[None]] = []
        for deployment in live:
            running = self._steps.get(deployment.id)
            if running is not None and not running.done():
                continue  # still on its last step: the others go on without it
            step = functools.partial(self.advance, deployment, now)
            future = self._pool.submit(self._guarded, deployment, step)
            self._steps[deployment.id] = future
            started.append(future)
        wait(started, timeout=TICK_WAIT_S)
        for gone in set(self._steps) - {d.id for d in live}:
            if self._steps[gone].done():
                del self._steps[gone]

    def _guarded(self, deployment: DeploymentRecord, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:
            # a change under the loop is tried again next tick; a step the transition tables
            # refuse is a fault of the loop, said as any other
            changed = isinstance(exc, (ConflictError, NotFoundError))
            if changed and not isinstance(exc, IllegalTransitionError):
                log.info("deployment %s changed under the loop (%s)", deployment.name, exc)
                return
            log.exception("control plane failed on deployment %s", deployment.name)
            try:
                self._report_failure(deployment, exc)
            except Exception:
                log.exception("could not record the failure of deployment %s", deployment.name)

    def _report_failure(self, deployment: DeploymentRecord, exc: Exception) -> None:
        """Say why a step failed as the deployment's ``error`` event (once per distinct
        cause, so a failure every tick is one event); a version that cannot start training
        fails at once (its deployment goes back to ACTIVE) instead of waiting forever."""
        cause = exc.message if isinstance(exc, DeepEdgeError) else f"{type(exc).__name__}: {exc}"
        current = self.deployments.get_by_id(deployment.id)
        stuck = [
            v
            for v in self.deployments.versions(current.id)
            if v.status is V.TRAINING and v.job_id is None and v.parent is not None
        ]
        if stuck:
            self.updates.job_failed(current, stuck[0], f"its update cannot start: {cause}")
            current = self.deployments.get_by_id(current.id)
        last = self.deployments.last_event(current.id, EventKind.ERROR)
        if last is None or last.message != cause:
            self.deployments.commit(current, Step(events=(Event(EventKind.ERROR, cause),)))

    # -- one deployment ---------------------------------------------------------------------

    def advance(self, deployment: DeploymentRecord, now: float) -> None:
        if not self.site().labeller_ready(deployment.spec):
            return  # its golden labeller is being trained in the background
        if deployment.spec.placement is not None:
            advance_placement(self.store, self.deployments, self.workspace, self.tick_lock,
                              self.wake_manager, deployment)  # fmt: skip
            deployment = self.deployments.get_by_id(deployment.id)
        versions = {v.number: v for v in self.deployments.versions(deployment.id)}
        pending = [v for v in versions.values() if v.status in {V.TRAINING, V.CANDIDATE}]
        if pending:
            self._progress(deployment, pending[0], now)
            deployment = self.deployments.get_by_id(deployment.id)
        settled = deployment.next_window_at + self.settings.traffic_settle_s
        if deployment.serving_version is not None and now >= settled:
            self._window(deployment, now)
        elif deployment.serving_version is not None and self._check_moved(deployment.id, now):
            ended = self._moved_end(deployment, now)
            if ended is not None:  # the window ends where its inputs moved
                self._window(deployment, now, ended)

    def _check_moved(self, deployment_id: str, now: float) -> bool:
        """Whether an open window's inputs are due to be tested again (every
        :data:`MOVED_CHECK_S`)."""
        if now - self._moved_checked.get(deployment_id, -math.inf) < MOVED_CHECK_S:
            return False
        self._moved_checked[deployment_id] = now
        return True

    def _moved_end(self, deployment: DeploymentRecord, now: float) -> float | None:
        """Where the open window's inputs moved (:mod:`window_edges`), or None."""
        window_s = deployment.spec.window_s
        history = self.deployments.windows(deployment.id, 2)
        start = window_start(deployment.next_window_at, window_s, history)
        first, split, last = moved_look(start, now, window_s)
        samples = self.site().samples.window(deployment.id, first, last)
        before = [s for s in samples if s.at < split]
        newest = [s for s in samples if s.at >= split]
        ended = moved_end(before, newest)
        if ended is None and split <= start:  # the window holds a new condition whole?
            ended = moved_whole_end(before, newest, start, now, window_s, history)
        if ended is not None:
            log.info("deployment %s: window %d ends early at %.3f, where its inputs moved",
                     deployment.name, deployment.window + 1, ended)  # fmt: skip
        return ended

    def _progress(self, deployment: DeploymentRecord, version: ModelVersion, now: float) -> None:
        if version.status is V.CANDIDATE:
            self.updates.judge_upload(deployment, version, now)
        elif version.parent is None and version.job_id is None:
            with self._due_lock:
                self._first_due.append((deployment, version))
        elif version.job_id is None:
            self._submit_or_join(deployment, version)
        else:
            self.updates.follow(deployment, version)

    def _submit_or_join(self, deployment: DeploymentRecord, version: ModelVersion) -> None:
        """A version to train: its own ``model-update`` job, or its edge server's next
        window (submitted at the end of the tick, with every other deployment there)."""
        server = server_of(deployment)
        if server is None:
            self.updates.submit(deployment, version)
        else:
            with self._due_lock:
                self._edge_due.add((deployment.tenant_id, server))

    def _first(self, deployment: DeploymentRecord, version: ModelVersion, now: float) -> None:
        failed = functools.partial(self._report_failure, deployment)
        if self.first.ready(deployment, version, now, failed):
            self.deployments.commit(deployment, register_first(deployment, version, now))
            self.advance(self.deployments.get_by_id(deployment.id), now)

    def _window(self, deployment: DeploymentRecord, now: float,
                ended: float | None = None) -> None:  # fmt: skip
        """Score the window that is due (or that ends early at ``ended``, where its inputs
        moved), decide (:func:`transitions.window`), commit; a new version's job is
        submitted at once (the trigger lag is this tick)."""
        spec, site = deployment.spec, self.site()
        index, due = deployment.window + 1, deployment.next_window_at
        versions = {v.number: v for v in self.deployments.versions(deployment.id)}
        # far behind (a restart after downtime): this window reaches to now, so no sampled
        # request falls between windows, and the next is due a window from now
        end = catch_up_end(due, now, spec.window_s) if ended is None else ended
        history = self.deployments.windows(deployment.id, LEVEL_HORIZON_WINDOWS)
        start = window_start(due, spec.window_s, history)
        policy = Policy.of(spec)
        sample = site.traffic(deployment, index, start, end, now,
                              recovery_under_way(policy, deployment, versions, history),
                              follows_a_move(due, start, spec.window_s),
                              history[-1].at if history else None)  # fmt: skip
        confidence = spec.gate.confidence

        def predict(number: int, images: np.ndarray) -> np.ndarray:
            return site.predictions(deployment, self.artifact(deployment, number), images)

        scores = score_window(deployment, sample, predict, confidence)
        if deployment.canary_version is not None:  # its verdict over the whole window
            whole = take_canary_census(site, deployment, sample, predict, now)
            if whole is not None:
                uniform = scores.canary_versus_serving or paired_from_counts(0, 0, 0, 0,
                                                                             confidence)
                scores = dataclasses.replace(scores,
                                             canary_versus_serving=with_census(uniform, whole))
        facts = window_facts(deployment, sample, scores, versions, history, now,
                             self._undecided_streak(deployment, index))  # fmt: skip
        if ended is not None:  # the next window holds the new condition only, and is short
            facts = dataclasses.replace(facts, next_window_s=spec.window_s * MOVED_WINDOW_SHARE)
        busy = any(v.status in LIVE_VERSIONS for n, v in versions.items()
                   if n != deployment.canary_version)  # fmt: skip
        verdict = window(policy, deployment, facts, busy)
        if verdict.wants_kept:
            assert deployment.serving_version is not None
            kept = kept_versions(versions, deployment.serving_version, sample.severity)
            scored = score_kept(deployment, sample, kept, predict, confidence)
            moved = inputs_moved(sample.severity, history[-1].severity if history else None)
            # the most promising first: the census's labels go to them while its cap lasts
            # (or one whose data the window looks like: its census can show it no worse)
            asked = [n for n, c in sorted(scored, key=lambda item: -item[1].diff)
                     if needs_census(c, moved or looks_like_kept(
                         versions, n, deployment.serving_version, sample.severity))]  # fmt: skip
            if asked:  # the requests they answer apart from the served ones, all labelled
                census = take_census(site, deployment, sample, asked, predict, now)
                scored = tuple((n, with_census(c, census[n]) if n in census else c)
                               for n, c in scored)  # fmt: skip
            verdict = window(policy, deployment, dataclasses.replace(facts, kept=scored), busy)
        step = verdict.step
        if sample.problem and self._new_error(deployment, sample.problem):
            step = dataclasses.replace(step, events=(*step.events,
                                                     Event(EventKind.ERROR, sample.problem,
                                                           window=index)))  # fmt: skip
        self.deployments.commit(deployment, step)
        for change in step.versions:  # a routine update a drift overtook stops training
            if change.status is V.CANCELLED and change.number in versions:
                self.updates.halt(versions[change.number])
        if verdict.step.new_versions:
            fresh = self.deployments.get_by_id(deployment.id)
            number = verdict.step.new_versions[0].number
            self._submit_or_join(fresh, self.deployments.version(deployment.id, number))

    def _new_error(self, deployment: DeploymentRecord, message: str) -> bool:
        """Whether ``message`` differs from the deployment's newest error (said once)."""
        last = self.deployments.last_event(deployment.id, EventKind.ERROR)
        cause = message.split(": ", 1)[-1]
        return last is None or last.message.split(": ", 1)[-1] != cause

    def _undecided_streak(self, deployment: DeploymentRecord, index: int) -> str | None:
        """The reasons of the newest undecided event, when it is recent: the same reasons
        are said again only after ``UNDECIDED_REPEAT_WINDOWS`` windows."""
        last = self.deployments.last_event(deployment.id, EventKind.UNDECIDED)
        if last is None or last.window is None or last.window < index - UNDECIDED_REPEAT_WINDOWS:
            return None
        return str(last.detail.get("reason"))
