"""The control plane: the continuous-learning loop of every deployment, as jobs.

One thread in the manager process runs :meth:`ControlPlane.tick`; each tick, for every
deployment that is not stopped (all state is in the store, so a restarted service simply
carries on, level-triggered like the job manager)::

    progress  -> a version being trained: submit its update job (idempotent per version):
                 ``model-update`` (Deep-Edge across the nodes) or, on an edge server,
                 ``ekya-window`` (one Ekya window: Thief chooses the retraining
                 configuration and the GPU shares of inference and retraining; its
                 decision is recorded as the window's ``allocation`` event), or register
                 the job's result when it COMPLETED: accuracy gate on the held-out
                 golden-labelled split -> canary (or serving) / REJECTED; a window whose
                 scheduler chose not to retrain CANCELS the version; a FAILED job fails
                 the version and the deployment goes back to ACTIVE
    window    -> when the next window is due: score the serving version (and the canary on
                 its share, and the previous version in the shadow) on the window's
                 golden-labelled sample; roll back at once if the served version is worse
                 than the one it replaced; judge a canary whose windows are done; decide
                 the trigger (request, accuracy drop, sample count, schedule) and start the
                 next version

Each tick first records the data plane's new moves (replicas moved off a lost or draining
node by its controller) as their deployments' ``move`` events, each once
(:mod:`deepedge.controlplane.serving_moves`).

Every decision is committed with its events in one transaction
(:meth:`DeploymentStore.commit`); the policy itself is pure (:mod:`deepedge.controlplane.rollout`).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deepedge.controlplane.artifacts import artifact_path, pending_upload, served_path
from deepedge.controlplane.deployment_spec import (
    MAX_UPDATE_SAMPLES,
    MIN_UPDATE_SAMPLES,
    UpdateResources,
)
from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
from deepedge.controlplane.edge_server_window import EdgeServerWindows, server_of
from deepedge.controlplane.live_nodes import (
    LiveNodes,
    fresh_snapshot,
    read_snapshot,
    selected_now,
    selection_note,
)
from deepedge.controlplane.records import (
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
    TriggerKind,
    WindowPoint,
)
from deepedge.controlplane.rollout import (
    TriggerFacts,
    canary_holds,
    decide_trigger,
    must_roll_back,
    passes_gate,
)
from deepedge.controlplane.rollout_status import LIVE_VERSIONS, DeploymentStatus, VersionStatus
from deepedge.controlplane.serving_moves import MoveRecorder
from deepedge.controlplane.update_jobs import (
    PARENT_FILE,
    TRAIN_FILE,
    deep_edge_allocation,
    ekya_allocation,
    live_allocation_text,
    model_update_job,
    read_json,
    result_model,
    stream_outcome,
)
from deepedge.controlplane.update_resources import LearnerRequest, learner_request
from deepedge.core.errors import ConflictError, DeepEdgeError, NotFoundError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.serving_decisions import decisions_path
from deepedge.service.config import ServiceSettings
from deepedge.service.manifest import JobKind, JobManifest
from deepedge.service.records import TenantId
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore
from deepedge.service.workspace import Workspace

if TYPE_CHECKING:
    from deepedge.controlplane.site import Site, TrafficWindow

log = logging.getLogger(__name__)

D, V = DeploymentStatus, VersionStatus
MAX_LAG_WINDOWS = 5  # a loop this far behind (e.g. after downtime) skips ahead in time


class ControlPlane:
    def __init__(
        self,
        store: JobStore,
        settings: ServiceSettings,
        tick_lock: threading.Lock | None = None,
        wake_manager: Callable[[], None] | None = None,
        first_versions_inline: bool = False,
    ) -> None:
        """``tick_lock`` is held by the job manager around its ticks: a job is submitted
        and its files staged under it, so the manager never deploys a half-staged job.
        First versions are trained in a background thread (seconds of CPU each, which would
        delay every other deployment's window), or, ``first_versions_inline``, in the tick
        itself, one per tick (deterministic: for tests that inject time)."""
        self.store = store
        self.deployments = DeploymentStore(store)
        self.settings = settings
        self.workspace = Workspace(settings.data_dir)
        self.tick_lock = tick_lock or threading.Lock()
        self.wake_manager = wake_manager or (lambda: None)
        self._site: Site | None = None
        self._first_due: list[tuple[DeploymentRecord, ModelVersion]] = []
        self._first_inline = first_versions_inline
        self._first_pool: ThreadPoolExecutor | None = None
        self._first_training: dict[tuple[str, int], Future[None]] = {}
        self._first_failed: dict[tuple[str, int], float] = {}  # when its training last failed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.edge = EdgeServerWindows(self)
        self._edge_due: set[tuple[TenantId, str]] = set()
        self._host_gpus = settings.host_gpus
        self.moves = MoveRecorder(self.deployments, decisions_path(settings.data_dir))

    def host_gpus(self) -> int:
        """GPUs of the service's host (an edge server's window asks the quota for GPUs
        there, for cores elsewhere)."""
        if self._host_gpus is None:
            import torch

            self._host_gpus = torch.cuda.device_count()
        return self._host_gpus

    # -- loop -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="deepedge-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._first_pool is not None:
            self._first_pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(time.time())
            except Exception:
                log.exception("control-plane tick failed")
            self._stop.wait(self.settings.control_tick_s)

    def site(self) -> Site:
        if self._site is None:
            from deepedge.controlplane.site import Site
            from deepedge.controlplane.tenant_workload import TenantWorkloads
            from deepedge.service.sandbox_run import SandboxRunner

            workloads = TenantWorkloads(SandboxRunner.for_service(self.settings), self.store.tenant)
            self._site = Site(self.settings.data_dir, workloads)
        return self._site

    def tick(self, now: float) -> None:
        """The data plane's new moves recorded as events first (:class:`MoveRecorder`); then
        every deployment's due window; then the first versions due: registered
        once their weights are trained (in the background, or inline: at most one per tick,
        after every due window), so a burst of new deployments never holds up the others'
        windows; then one window per edge server whose deployments wait for an update
        (:mod:`deepedge.controlplane.edge_server_window`)."""
        self._first_due = []
        self._edge_due = set()
        try:
            self.moves.record()
        except Exception:
            log.exception("control plane failed to record the data plane's moves")
        for deployment in self.deployments.live():
            self._guarded(deployment, functools.partial(self.advance, deployment, now))
        for deployment, version in self._first_due[:1] if self._first_inline else self._first_due:
            self._guarded(deployment, functools.partial(self._first, deployment, version, now))
        # Last: every deployment of a server that triggered in this tick joins its window.
        for tenant_id, server in sorted(self._edge_due):
            try:
                self.edge.submit(tenant_id, server, now)
            except (ConflictError, NotFoundError) as exc:
                log.info("edge server %s changed under the loop (%s)", server, exc)
            except Exception:
                log.exception("control plane failed on edge server %s", server)

    def _first(self, deployment: DeploymentRecord, version: ModelVersion, now: float) -> None:
        path = self.artifact(deployment, version.number)
        if self._first_inline and not served_path(path).exists():
            self.site().write_first(deployment, path)
        if not served_path(path).exists():  # (written atomically: it exists once whole)
            key = (deployment.id, version.number)
            running = self._first_training.get(key)
            if running is not None and running.done() and running.exception() is not None:
                failure = running.exception()
                assert isinstance(failure, Exception)
                log.error("training the first version of %s failed: %s", deployment.name,
                          failure)  # fmt: skip
                self._first_training.pop(key)
                self._first_failed[key] = now
                self._report_failure(deployment, failure)
                return
            if running is None and now >= self._first_failed.get(key, -math.inf) + FIRST_RETRY_S:
                if self._first_pool is None:
                    self._first_pool = ThreadPoolExecutor(
                        1, thread_name_prefix="first-version", initializer=lower_thread_priority
                    )
                self._first_training[key] = self._first_pool.submit(
                    self.site().write_first, deployment, path
                )
            return
        self._first_failed.pop((deployment.id, version.number), None)
        self._first_training.pop((deployment.id, version.number), None)
        self._register_first(deployment, version, now)
        self.advance(self._fresh(deployment), now)

    def _fresh(self, deployment: DeploymentRecord) -> DeploymentRecord:
        return self.deployments.get_by_id(deployment.id)

    def _guarded(self, deployment: DeploymentRecord, step: Callable[[], None]) -> None:
        try:
            step()
        except (ConflictError, NotFoundError) as exc:
            log.info("deployment %s changed under the loop (%s)", deployment.name, exc)
        except Exception as exc:
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
        current = self._fresh(deployment)
        stuck = [
            v
            for v in self.deployments.versions(current.id)
            if v.status is V.TRAINING and v.job_id is None and v.parent is not None
        ]
        if stuck:
            self.job_failed(current, stuck[0], f"its update cannot start: {cause}")
            current = self._fresh(current)
        last = self.deployments.last_event(current.id, EventKind.ERROR)
        if last is None or last.message != cause:
            self.deployments.commit(current, Step(events=(Event(EventKind.ERROR, cause),)))

    def advance(self, deployment: DeploymentRecord, now: float) -> None:
        if not self.site().labeller_ready(deployment.spec):
            return  # its golden labeller is being trained in the background
        if deployment.spec.placement is not None:
            self._placement(deployment)
            deployment = self.deployments.get_by_id(deployment.id)
        versions = {v.number: v for v in self.deployments.versions(deployment.id)}
        pending = [v for v in versions.values() if v.status in {V.TRAINING, V.CANDIDATE}]
        if pending:
            self._progress(deployment, pending[0], versions, now)
            deployment = self.deployments.get_by_id(deployment.id)
        settled = deployment.next_window_at + self.settings.traffic_settle_s
        if deployment.serving_version is not None and now >= settled:
            self._window(deployment, versions_now(self.deployments, deployment), now)

    def artifact(self, deployment: DeploymentRecord, number: int) -> Path:
        return artifact_path(self.settings.data_dir, deployment, number)

    # -- versions in progress -------------------------------------------------------------

    def _progress(
        self,
        deployment: DeploymentRecord,
        version: ModelVersion,
        versions: dict[int, ModelVersion],
        now: float,
    ) -> None:
        if version.status is V.CANDIDATE:
            self._judge_uploaded(deployment, version, now)
        elif version.parent is None and version.job_id is None:
            self._first_due.append((deployment, version))
        elif version.job_id is None:
            self._submit_or_join(deployment, version, now)
        else:
            self._follow_job(deployment, version, versions, now)

    def _submit_or_join(
        self, deployment: DeploymentRecord, version: ModelVersion, now: float
    ) -> None:
        """A version to train: its own ``model-update`` job, or its edge server's next
        window (submitted at the end of the tick, with every other deployment there)."""
        server = server_of(deployment)
        if server is None:
            self._submit(deployment, version, now)
        else:
            self._edge_due.add((deployment.tenant_id, server))

    def _register_first(
        self, deployment: DeploymentRecord, version: ModelVersion, now: float
    ) -> None:
        n = version.number
        self.deployments.commit(
            deployment,
            Step(
                deployment={"status": D.ACTIVE, "serving_version": n, "next_window_at": now},
                versions=(
                    VersionChange(n, V.CANDIDATE, metrics={"epochs": deployment.spec.base_epochs}),
                    VersionChange(n, V.SERVING),
                ),
                events=(
                    Event(EventKind.VERSION_REGISTERED, f"v{n} trained offline on windows "
                          f"{list(version.data_windows)}", version=n),
                    Event(EventKind.PROMOTED, f"v{n} serves on every node (first version)",
                          version=n),
                ),
            ),
        )  # fmt: skip

    def training_data(
        self, deployment: DeploymentRecord, version: ModelVersion
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """The labelled live samples of the version's windows, split into training and
        held-out data (deterministic, so a restarted service stages exactly the same
        files); the newest ``MAX_UPDATE_SAMPLES`` at most."""
        spec = deployment.spec
        due = {w.window: w.due_at for w in self.deployments.windows(deployment.id)}
        ranges = [(due[w] - spec.window_s, due[w]) for w in version.data_windows if w in due]
        x, y = self.site().labelled_between(deployment.id, ranges)
        x, y = x[-MAX_UPDATE_SAMPLES:], y[-MAX_UPDATE_SAMPLES:]
        order = np.random.default_rng([spec.stream.seed, version.number]).permutation(len(y))
        n_val = max(1, round(spec.update.validation_fraction * len(y))) if len(y) else 0
        val, train = order[:n_val], order[n_val:]
        return (x[train], y[train]), (x[val], y[val])

    def _submit(self, deployment: DeploymentRecord, version: ModelVersion, now: float) -> None:
        spec = deployment.spec
        train, val = self.training_data(deployment, version)
        if len(train[1]) < MIN_UPDATE_SAMPLES:  # an update asked for before enough windows
            self.job_failed(
                deployment,
                version,
                f"only {len(train[1])} training samples in "
                f"windows {list(version.data_windows)}; need {MIN_UPDATE_SAMPLES}",
            )
            return
        parent = self.artifact(deployment, version.parent or 0)
        nodes, note = list(spec.target.nodes), ""
        if spec.target.live and spec.target.follows_selector:  # what it matches now
            snapshot = self.live_nodes()
            now_nodes = selected_now(spec.target, snapshot)
            if not now_nodes:
                what = "its selector matches" if spec.target.selector else "there is"
                self.job_failed(deployment, version, f"{what} no alive agent of the cluster")
                return
            nodes, note = now_nodes, selection_note(nodes, now_nodes)
        elif spec.target.live:  # the named nodes that are alive now; none: nothing to train on
            alive = {n.node_id for n in self.live_nodes().alive()}
            gone = [n for n in nodes if n not in alive]
            nodes = [n for n in nodes if n in alive]
            if not nodes:
                self.job_failed(deployment, version, f"none of its nodes ({', '.join(gone)}) "
                                "is an alive agent of the cluster")  # fmt: skip
                return
            note = f" ({', '.join(gone)} not alive: trains without)" if gone else ""
        data_mb = (train[0].nbytes + val[0].nbytes) / (1 << 20)
        request = self.learner_request(spec.update.resources, data_mb)
        kind, document = JobKind.MODEL_UPDATE, model_update_job(spec, len(train[1]), nodes)
        manifest = JobManifest.model_validate(
            {
                "name": f"{deployment.name}-v{version.number}",
                "kind": kind,
                # sized against Ray's object store (update_resources); training yields the
                # CPU to the service (the control loop scores every deployment's windows)
                "resources": {
                    "cpus": request.cpus,
                    "gpus": request.gpus,
                    "mem_mb": request.mem_mb,
                    "nice": 5,
                },
                "checkpoint_interval_s": 30,
                "restart_limit": 2,
                "retry_limit": 2,
                "spec": {"document": document},
            }
        )
        tenant = self.store.tenant(deployment.tenant_id)
        key = f"deployment-{deployment.id}-v{version.number}"
        with self.tick_lock:
            job, _ = self.store.submit(tenant, manifest, idempotency_key=key)
            self._stage(job.tenant_id, job.id, train, val, parent)
        self.wake_manager()
        trigger_window = max(version.data_windows)
        due = self.deployments.recent_window_due_at(deployment.id, trigger_window)
        self.deployments.commit(
            deployment,
            Step(
                deployment={"current_job_id": job.id},
                versions=(VersionChange(version.number, job_id=job.id),),
                events=(
                    Event(EventKind.JOB_SUBMITTED,
                          f"{kind.value} job {job.id} trains v{version.number} from "
                          f"v{version.parent} on windows {list(version.data_windows)}{note}",
                          window=trigger_window, version=version.number, job_id=job.id,
                          detail={"window_due_at": due, "samples": len(train[1]) + len(val[1]),
                                  "nodes": nodes, "live": spec.target.live,
                                  "resources": {"cpus": request.cpus, "gpus": request.gpus,
                                                "mem_mb": request.mem_mb,
                                                "mem_mb_derived": request.derived,
                                                "object_store_mb": request.object_store_mb}}),
                ),
            ),
        )  # fmt: skip

    def live_nodes(self) -> LiveNodes:
        """The node watcher's recent view of the service's cluster (DependencyUnavailable
        when it has none: the step is retried on a later tick)."""
        assert self.settings.ray_address is not None, "a live target needs a Ray cluster"
        return fresh_snapshot(read_snapshot(self.settings.data_dir), time.time(),
                              self.settings.ray_address)  # fmt: skip

    def learner_request(self, resources: UpdateResources, data_mb: float) -> LearnerRequest:
        """An update job's resources, sized against the cluster's object store where its
        learner joins the service's Ray cluster (:mod:`deepedge.controlplane.update_resources`;
        a sandboxed learner starts a private Ray instead, sized by Ray from the host)."""
        joins = self.settings.ray_address is not None and not self.settings.confinement().sandboxed
        snapshot = self.live_nodes() if joins else None
        return learner_request(resources, data_mb, snapshot, on_ray=self.settings.learners_on_ray)

    def _stage(
        self,
        tenant_id: str,
        job_id: str,
        train: tuple[np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray],
        parent: Path,
    ) -> None:
        work = self.workspace.job_dir(tenant_id, job_id).work
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / "train.tmp.npz"
        np.savez(tmp, x_train=train[0], y_train=train[1], x_val=val[0], y_val=val[1])
        tmp.replace(work / TRAIN_FILE)
        (work / PARENT_FILE).write_bytes(parent.read_bytes())

    def _follow_job(
        self,
        deployment: DeploymentRecord,
        version: ModelVersion,
        versions: dict[int, ModelVersion],
        now: float,
    ) -> None:
        assert version.job_id is not None
        try:
            job = self.store.get(version.job_id)
        except NotFoundError:
            self.job_failed(deployment, version, "its job was deleted")
            return
        if job.status is JobStatus.COMPLETED:
            self._register(deployment, version, versions, now)
        elif job.status in {JobStatus.FAILED, JobStatus.HALTED}:
            self.job_failed(deployment, version, f"job {job.id} {job.status}: {job.error_message}")
        elif job.status in {JobStatus.QUEUED, JobStatus.PENDING}:
            work = self.workspace.job_dir(job.tenant_id, job.id).work
            if self.edge.restage_if_missing(job):
                return
            if not (work / TRAIN_FILE).exists():  # a crash between submit and staging
                train, val = self.training_data(deployment, version)
                parent = self.artifact(deployment, version.parent or 0)
                with self.tick_lock:
                    self._stage(job.tenant_id, job.id, train, val, parent)

    def job_failed(self, deployment: DeploymentRecord, version: ModelVersion, why: str) -> None:
        self.deployments.commit(
            deployment,
            Step(
                deployment={"status": D.ACTIVE, "current_job_id": None},
                versions=(VersionChange(version.number, V.FAILED),),
                events=(
                    Event(EventKind.JOB_FAILED, f"v{version.number} not trained: {why}",
                          version=version.number, job_id=version.job_id),
                ),
            ),
        )  # fmt: skip

    def _not_retrained(
        self, deployment: DeploymentRecord, version: ModelVersion, decision: Event
    ) -> None:
        """An Ekya window that left no model for this stream (its scheduler gave the whole
        window to inference, or the window's hot-load gate kept the deployed model): the
        version is CANCELLED; the decision is still recorded."""
        self.deployments.commit(
            deployment,
            Step(
                deployment={"status": D.ACTIVE, "current_job_id": None},
                versions=(VersionChange(version.number, V.CANCELLED,
                                        metrics={"ekya_retrained": 0.0}),),
                events=(decision,),
            ),
        )  # fmt: skip

    def _register(
        self,
        deployment: DeploymentRecord,
        version: ModelVersion,
        versions: dict[int, ModelVersion],
        now: float,
    ) -> None:
        """Keep the job's weights as the version's artifact, then gate it on the held-out
        golden-labelled split of its own training windows against its parent."""
        assert version.job_id is not None
        job_dir = self.workspace.job_dir(deployment.tenant_id, version.job_id)
        result = read_json(job_dir.results / "result.json")
        ekya = ekya_allocation(deployment.name, deployment.spec.target.nodes[0], version.number,
                               max(version.data_windows), version.job_id, result)  # fmt: skip
        if ekya is not None:
            self.edge.record_inference_shares(self.store.get(version.job_id), result)
        try:
            model_bytes = result_model(job_dir, deployment.name if ekya is not None else None)
        except OSError as exc:  # a link, or not a regular file: never followed
            self.job_failed(deployment, version, f"job {version.job_id}'s model: {exc}")
            return
        if model_bytes is None and ekya is not None:  # the window retrained another stream
            self._not_retrained(deployment, version, ekya)
            return
        if model_bytes is None:
            self.job_failed(deployment, version, f"job {version.job_id} left no model")
            return
        target = self.artifact(deployment, version.number)
        try:
            with tempfile.TemporaryDirectory(prefix="deepedge-result-") as folder:
                result_file = Path(folder) / "model"
                result_file.write_bytes(model_bytes)
                self.site().write_version(deployment, result_file, target, None)
        except DeepEdgeError as exc:
            self.job_failed(deployment, version, f"job {version.job_id}'s model: {exc.message}")
            return
        if not self._servable(deployment, version, [VersionChange(version.number, V.CANDIDATE)]):
            return
        _, (x_val, y_val) = self.training_data(deployment, version)
        site = self.site()
        candidate = site.accuracy(deployment, target, x_val, y_val) or 0.0
        # The candidate would replace what serves now: normally its parent, but a rollback
        # during its training may have put an older version back.
        rival = deployment.serving_version or version.parent
        parent_acc = (
            site.accuracy(deployment, self.artifact(deployment, rival), x_val, y_val)
            if rival is not None
            else None
        )
        metrics = {"gate_accuracy": candidate, "held_out_samples": float(len(y_val))}
        if parent_acc is not None:
            metrics["parent_gate_accuracy"] = parent_acc
        outcome = stream_outcome(deployment.name, result)
        for key, name in (
            ("final_accuracy", "job_final_accuracy"),
            ("estimated_accuracy", "ekya_estimated_accuracy"),
            ("validation_accuracy", "job_validation_accuracy"),
        ):
            if isinstance(outcome.get(key), float):
                metrics[name] = outcome[key]  # fmt: skip
        events = [
            Event(EventKind.VERSION_REGISTERED,
                  f"v{version.number} registered from job {version.job_id}",
                  version=version.number, job_id=version.job_id),
        ]  # fmt: skip
        allocation = deep_edge_allocation(result)
        if ekya is not None:
            events.append(ekya)
        elif allocation:
            keys = ("live", "planned_on", "ps_node", "workers_ran_on", "placements")
            live: dict[str, Any] = {k: result[k] for k in keys if k in result}
            events.append(
                Event(EventKind.ALLOCATION, f"v{version.number} trained on "
                      f"{', '.join(a['node'] for a in allocation if a['selected'])}"
                      f"{live_allocation_text(result)}",
                      window=max(version.data_windows), version=version.number,
                      job_id=version.job_id, detail={"workers": allocation,
                      "policy": result.get("plan", {}).get("policy"), **live})
            )  # fmt: skip
        changes = [VersionChange(version.number, V.CANDIDATE, metrics=metrics)]
        step = self._gate(deployment, version, candidate, parent_acc, changes, events, now)
        self.deployments.commit(deployment, step)

    def _judge_uploaded(
        self, deployment: DeploymentRecord, version: ModelVersion, now: float
    ) -> None:
        """An operator-registered version: its upload loaded into the deployment's model
        and written as the version first (one that does not load is rejected), then gated on
        the newest window's golden-labelled sample (which no version trained on), unless the
        operator skipped the gate."""
        if not self._store_upload(deployment, version):
            return
        if not self._servable(deployment, version, []):
            return
        if version.metrics.get("skip_gate"):
            events = [Event(EventKind.GATE_PASSED, f"v{version.number}: gate skipped by the "
                            "operator", version=version.number)]  # fmt: skip
            self.deployments.commit(deployment, self._rollout(deployment, version, [], events))
            return
        site = self.site()
        spec = deployment.spec
        newest = self.deployments.windows(deployment.id, 1)
        window = site.traffic(
            deployment, newest[0].window, newest[0].due_at - spec.window_s, newest[0].due_at,
            now,
        ) if newest else site.traffic(deployment, 0, now, now, now)  # fmt: skip
        candidate = site.accuracy(deployment, self.artifact(deployment, version.number),
                                  window.images, window.labels) or 0.0  # fmt: skip
        parent_acc = None
        if version.parent is not None:
            parent = self.artifact(deployment, version.parent)
            parent_acc = site.accuracy(deployment, parent, window.images, window.labels)
        metrics = {"gate_accuracy": candidate, "held_out_samples": float(len(window.labels))}
        if parent_acc is not None:
            metrics["parent_gate_accuracy"] = parent_acc
        step = self._gate(
            deployment, version, candidate, parent_acc,
            [VersionChange(version.number, metrics=metrics)], [], now,
        )  # fmt: skip
        self.deployments.commit(deployment, step)

    def _servable(
        self, deployment: DeploymentRecord, version: ModelVersion, changes: list[VersionChange]
    ) -> bool:
        """Export the version for serving; a model that cannot be served (it cannot be
        traced, or its trace disagrees with it) is REJECTED with the reason."""
        try:
            self.site().export(deployment, self.artifact(deployment, version.number))
        except DeepEdgeError as exc:
            n = version.number
            self.deployments.commit(
                deployment,
                Step(
                    deployment={"status": D.ACTIVE, "current_job_id": None},
                    versions=(*changes, VersionChange(n, V.REJECTED)),
                    events=(Event(EventKind.GATE_FAILED, f"v{n} cannot be served: {exc.message}",
                                  version=n),),
                ),
            )  # fmt: skip
            return False
        return True

    def _store_upload(self, deployment: DeploymentRecord, version: ModelVersion) -> bool:
        """Write an operator's upload as the version's artifact (flat parameters take the
        parent's buffers); False, with the version rejected, when it does not load."""
        target = self.artifact(deployment, version.number)
        upload = pending_upload(self.settings.data_dir, deployment, version.number)
        if upload is None:
            return True  # written already (or registered by an older deepedge)
        parent = self.artifact(deployment, version.parent) if version.parent is not None else None
        try:
            self.site().write_version(deployment, upload, target, parent)
        except DeepEdgeError as exc:
            n = version.number
            self.deployments.commit(deployment, Step(
                deployment={"status": D.ACTIVE},
                versions=(VersionChange(n, V.REJECTED),),
                events=(Event(EventKind.GATE_FAILED, f"v{n}: the uploaded model does not load "
                              f"into the deployment's model: {exc.message}", version=n),),
            ))  # fmt: skip
            return False
        finally:
            upload.unlink(missing_ok=True)
        return True

    def _gate(
        self,
        deployment: DeploymentRecord,
        version: ModelVersion,
        candidate: float,
        parent_acc: float | None,
        changes: list[VersionChange],
        events: list[Event],
        now: float,
    ) -> Step:
        n, spec = version.number, deployment.spec
        rival = deployment.serving_version or version.parent
        versus = f"{parent_acc:.3f} of v{rival}" if parent_acc is not None else "no rival"
        if not passes_gate(spec.gate, candidate, parent_acc):
            return Step(
                deployment={"status": D.ACTIVE, "current_job_id": None},
                versions=(*changes, VersionChange(n, V.REJECTED)),
                events=(*events, Event(EventKind.GATE_FAILED,
                        f"v{n} held-out accuracy {candidate:.3f} < {versus} + "
                        f"{spec.gate.min_gain:g}: rejected", version=n)),
            )  # fmt: skip
        events.append(
            Event(EventKind.GATE_PASSED, f"v{n} held-out accuracy {candidate:.3f} vs {versus}",
                  version=n)
        )  # fmt: skip
        return self._rollout(deployment, version, changes, events)

    def _rollout(
        self,
        deployment: DeploymentRecord,
        version: ModelVersion,
        changes: list[VersionChange],
        events: list[Event],
    ) -> Step:
        n, spec = version.number, deployment.spec
        if spec.canary.windows > 0 and not version.metrics.get("skip_canary"):
            nodes = spec.canary_nodes()
            return Step(
                deployment={"status": D.CANARY, "canary_version": n, "canary_windows_done": 0,
                            "current_job_id": None},
                versions=(*changes, VersionChange(n, V.CANARY)),
                events=(*events, Event(EventKind.CANARY_STARTED,
                        f"v{n} serves {spec.canary.fraction:.0%} of the traffic on "
                        f"{', '.join(nodes)} for {spec.canary.windows} window(s)",
                        version=n, detail={"nodes": nodes, "fraction": spec.canary.fraction})),
            )  # fmt: skip
        return _promote(deployment, n, changes, events, "without a canary")

    # -- placement ------------------------------------------------------------------------

    def _placement(self, deployment: DeploymentRecord) -> None:
        """Solve the deployment's MVSP problem once, as a ``placement`` job, and record the
        decision (state in the newest ``placement`` event: submitted -> decided | failed)."""
        last = self.deployments.last_event(deployment.id, EventKind.PLACEMENT)
        state = last.detail.get("state") if last is not None else None
        if state in {"decided", "failed"}:
            return
        if last is None:
            manifest = JobManifest.model_validate(
                {"name": f"{deployment.name}-placement", "kind": JobKind.PLACEMENT,
                 "resources": {"cpus": 1, "mem_mb": 4096}, "retry_limit": 1,
                 "restart_limit": 1, "spec": {"document": deployment.spec.placement}}
            )  # fmt: skip
            tenant = self.store.tenant(deployment.tenant_id)
            key = f"deployment-{deployment.id}-placement"
            with self.tick_lock:
                job, _ = self.store.submit(tenant, manifest, idempotency_key=key)
            self.wake_manager()
            event = Event(EventKind.PLACEMENT, f"placement job {job.id} solves the MVSP problem",
                          job_id=job.id, detail={"state": "submitted"})  # fmt: skip
            self.deployments.commit(deployment, Step(events=(event,)))
            return
        assert last.job_id is not None
        job = self.store.get(last.job_id)
        if job.status is JobStatus.COMPLETED:
            result = read_json(
                self.workspace.job_dir(job.tenant_id, job.id).results / "result.json"
            )
            placed = [
                f"{p.get('variant')}x{p.get('instances', 1)}@{p.get('node')}"
                for p in result.get("placements", [])
                if isinstance(p, dict)
            ]
            detail = {
                "state": "decided",
                **{
                    k: result.get(k)
                    for k in (
                        "method",
                        "status",
                        "objective",
                        "avg_latency_ms",
                        "gap",
                        "placements",
                        "routes",  # the data plane routes each camera as the decision says
                    )
                },
            }
            event = Event(EventKind.PLACEMENT, f"placement decided ({result.get('status')}): "
                          f"{', '.join(placed) or 'nothing placed'}", job_id=job.id,
                          detail=detail)  # fmt: skip
        elif job.status in {JobStatus.FAILED, JobStatus.HALTED}:
            event = Event(
                EventKind.PLACEMENT,
                f"placement job {job.status}: {job.error_message}",
                job_id=job.id,
                detail={"state": "failed"},
            )
        else:
            return
        self.deployments.commit(deployment, Step(events=(event,)))

    # -- windows --------------------------------------------------------------------------

    def _window(
        self, deployment: DeploymentRecord, versions: dict[int, ModelVersion], now: float
    ) -> None:
        spec, site = deployment.spec, self.site()
        index, due = deployment.window + 1, deployment.next_window_at
        sample = site.traffic(deployment, index, due - spec.window_s, due, now)
        serving = deployment.serving_version
        assert serving is not None
        canary = deployment.canary_version
        share = sample.share(RouteKind.CANARY)  # (empty without a canary)
        main = sample.share(RouteKind.SERVING)

        def score(number: int | None, mask: np.ndarray) -> float | None:
            return self._score(deployment, number, sample, mask)

        accuracy = score(serving, main)
        previous = deployment.previous_version
        previous_acc = score(previous, main)
        canary_acc = score(canary, share)
        changes: list[VersionChange] = [VersionChange(serving, served_one_more_window=True)]
        events: list[Event] = []
        fields: dict[str, Any] = {
            "window": index,
            "next_window_at": _next_due(due, now, spec.window_s),
            "last_accuracy": accuracy,
            "samples_since_update": deployment.samples_since_update + len(sample.labels),
        }
        status = deployment.status
        if accuracy is not None and must_roll_back(spec.gate, accuracy, previous_acc):
            assert previous is not None
            step = _roll_back(deployment, serving, previous, index, accuracy, previous_acc)
            changes += step.versions
            events += step.events
            fields.update(step.deployment)
            serving = previous
        elif canary is not None:
            fields["canary_windows_done"] = deployment.canary_windows_done + 1
            if fields["canary_windows_done"] >= spec.canary.windows:
                verdict = self._judge_canary(
                    deployment, canary, canary_acc, score(serving, share), index
                )
                changes += verdict.versions
                events += verdict.events
                fields.update(verdict.deployment)
        status = fields.get("status", status)
        trigger = TriggerKind.NONE
        busy = "canary_version" in fields or any(
            v.status in LIVE_VERSIONS for v in versions.values() if v.number != canary
        )
        if status is D.ACTIVE and accuracy is not None and not busy:
            trigger = decide_trigger(
                spec.trigger,
                TriggerFacts(index, accuracy, deployment.last_update_window,
                             int(fields["samples_since_update"]), deployment.update_requested),
            )  # fmt: skip
        new_versions: tuple[NewVersion, ...] = ()
        if trigger is not TriggerKind.NONE:
            number = max(versions) + 1
            data = tuple(range(max(0, index - spec.update.recent_windows + 1), index + 1))
            new_versions = (NewVersion(number, serving, data, f"update on {trigger.value}"),)
            fields.update(status=D.UPDATING, last_update_window=index, samples_since_update=0,
                          update_requested=0)  # fmt: skip
            events.append(
                Event(EventKind.TRIGGER, f"window {index}: {trigger.value} (served accuracy "
                      f"{accuracy:.3f}); training v{number} from v{serving}",
                      window=index, version=number,
                      detail={"trigger": trigger.value, "accuracy": accuracy,
                              "window_due_at": due})
            )  # fmt: skip
        point = WindowPoint(
            window=index, at=now, due_at=due, served_version=deployment.serving_version,
            accuracy=accuracy, canary_version=canary, canary_accuracy=canary_acc,
            previous_version=previous, previous_accuracy=previous_acc,
            samples=len(sample.labels), trigger=trigger, severity=sample.severity,
        )  # fmt: skip
        self.deployments.commit(
            deployment,
            Step(deployment=fields, versions=tuple(changes), new_versions=new_versions,
                 window=point, events=tuple(events)),
        )  # fmt: skip
        if new_versions:  # submit at once: the trigger lag is this tick, not the next
            fresh = self.deployments.get_by_id(deployment.id)
            self._submit_or_join(
                fresh, self.deployments.version(deployment.id, new_versions[0].number), now
            )

    def _score(
        self, deployment: DeploymentRecord, number: int | None, window: TrafficWindow,
        mask: np.ndarray,
    ) -> float | None:  # fmt: skip
        """Version ``number``'s accuracy on the window's samples in ``mask``: the
        predictions the data plane returned where that version answered, its own
        predictions (in the shadow) on the requests another version answered."""
        if number is None or not mask.any():
            return None
        predictions = window.predictions[mask].copy()
        other = window.versions[mask] != number
        if other.any():
            predictions[other] = self.site().predictions(
                deployment, self.artifact(deployment, number), window.images[mask][other]
            )
        return float(np.mean(predictions == window.labels[mask]))

    def _judge_canary(
        self,
        deployment: DeploymentRecord,
        canary: int,
        canary_acc: float | None,
        serving_on_share: float | None,
        index: int,
    ) -> Step:
        assert deployment.serving_version is not None
        if canary_acc is None or serving_on_share is None:
            return Step()  # no canary traffic this window: judge on the next
        if canary_holds(deployment.spec.gate, canary_acc, serving_on_share):
            return _promote(
                deployment, canary, [], [], f"after its canary ({canary_acc:.3f} vs "
                f"{serving_on_share:.3f} on the canary share)", window=index,
            )  # fmt: skip
        return Step(
            deployment={"status": D.ACTIVE, "canary_version": None, "canary_windows_done": 0},
            versions=(VersionChange(canary, V.ROLLED_BACK,
                                    metrics={"canary_accuracy": canary_acc}),),
            events=(Event(EventKind.ROLLED_BACK,
                          f"canary v{canary} scored {canary_acc:.3f} < {serving_on_share:.3f} "
                          f"of v{deployment.serving_version} on its share: rolled back",
                          window=index, version=canary),),
        )  # fmt: skip


FIRST_RETRY_S = 60.0  # a first version whose training failed is tried again after this
FIRST_VERSION_NICE = 10  # the background training's niceness above the loop's own


def lower_thread_priority() -> None:
    """Lower the calling thread's CPU priority by ``FIRST_VERSION_NICE`` (Linux schedules
    threads alone: a thread id is a valid ``PRIO_PROCESS`` target), so that a burst of first
    versions trained in the background takes the cores the loop's windows do not need."""
    try:
        tid = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + FIRST_VERSION_NICE
        )
    except (AttributeError, OSError) as exc:  # not Linux, or not permitted: run as is
        log.info("first-version thread keeps its priority (%s)", exc)


def versions_now(store: DeploymentStore, deployment: DeploymentRecord) -> dict[int, ModelVersion]:
    return {v.number: v for v in store.versions(deployment.id)}


def _promote(
    deployment: DeploymentRecord,
    number: int,
    changes: list[VersionChange],
    events: list[Event],
    how: str,
    window: int | None = None,
) -> Step:
    old = deployment.serving_version
    retire = (VersionChange(old, V.RETIRED),) if old is not None and old != number else ()
    return Step(
        deployment={"status": D.ACTIVE, "serving_version": number, "previous_version": old,
                    "canary_version": None, "canary_windows_done": 0, "current_job_id": None},
        versions=(*changes, *retire, VersionChange(number, V.SERVING, replaced=old)),
        events=(*events, Event(EventKind.PROMOTED, f"v{number} serves on every node {how}; "
                               f"v{old} retired", window=window, version=number)),
    )  # fmt: skip


def _roll_back(
    deployment: DeploymentRecord,
    bad: int,
    previous: int,
    window: int | None,
    accuracy: float | None,
    previous_acc: float | None,
    reason: str | None = None,
) -> Step:
    why = reason or (
        f"served accuracy {accuracy:.3f} < {previous_acc:.3f} of v{previous} on window {window}"
    )
    canary = deployment.canary_version
    cancel = (VersionChange(canary, V.ROLLED_BACK),) if canary is not None else ()
    # An update being trained goes on (and is gated against what serves then).
    status = D.ACTIVE if deployment.status is D.CANARY else deployment.status
    return Step(
        deployment={"status": status, "serving_version": previous, "previous_version": None,
                    "canary_version": None, "canary_windows_done": 0},
        versions=(*cancel, VersionChange(bad, V.ROLLED_BACK), VersionChange(previous, V.SERVING)),
        events=(Event(EventKind.ROLLED_BACK, f"v{bad} rolled back to v{previous}: {why}",
                      window=window, version=bad, detail={"to_version": previous}),),
    )  # fmt: skip


def _next_due(due: float, now: float, window_s: float) -> float:
    following = due + window_s
    return now if now - following > MAX_LAG_WINDOWS * window_s else following
