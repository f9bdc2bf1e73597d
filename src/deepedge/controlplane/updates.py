"""A deployment's versions on their way to serving: trained by jobs, registered, gated.

:class:`Updates` is what the control loop (and an edge server's joint windows,
:mod:`deepedge.controlplane.edge_server_window`) does with a version that is not serving
yet:

* **train** it: the labelled live samples of its windows, split into training and held-out
  data (deterministic, so a restarted service stages the same files), staged with the
  parent's artifact into a ``model-update`` job submitted as the deployment's tenant
  (idempotent per version), sized by :mod:`deepedge.controlplane.update_resources`;
* **follow** the job: a completed job's model becomes the version's artifact (a user's
  workload loads it in the tenant's sandbox), exported for serving (a model that cannot
  be served is REJECTED), then gated against what serves on the held-out samples, both
  versions scored on the same samples (:func:`deepedge.controlplane.transitions.gate`);
* an operator's **upload**: loaded the same way, gated on the newest window's samples;
* a failed job, or an Ekya window that retrained another stream, ends the version.

Every decision is one committed :class:`~deepedge.controlplane.deployments.Step`, built by
the pure functions of :mod:`deepedge.controlplane.transitions`.
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deepedge.cluster.live_nodes import LiveNodes, fresh_snapshot, read_snapshot
from deepedge.controlplane.artifacts import artifact_path, pending_upload
from deepedge.controlplane.deployment_spec import (
    MAX_UPDATE_SAMPLES,
    MIN_UPDATE_SAMPLES,
    UpdateResources,
)
from deepedge.controlplane.deployments import DeploymentStore, Step, VersionChange
from deepedge.controlplane.evidence import PairedComparison, compare_paired
from deepedge.controlplane.live_nodes import selected_now, selection_note
from deepedge.controlplane.records import (
    GATE_ACCURACY,
    GATE_DIFF_LOW,
    PARENT_GATE_ACCURACY,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
)
from deepedge.controlplane.rollout_actions import halt_job
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.transitions import gate, rollout
from deepedge.controlplane.update_jobs import (
    PARENT_FILE,
    TRAIN_FILE,
    deep_edge_allocation,
    ekya_allocation,
    job_ended,
    live_allocation_text,
    model_update_job,
    read_json,
    result_model,
    stream_outcome,
    update_phases,
)
from deepedge.controlplane.update_resources import LearnerRequest, learner_request
from deepedge.controlplane.window_facts import Policy
from deepedge.core.errors import DeepEdgeError, NotFoundError
from deepedge.dataplane.sample_store import CHOSEN_SOURCES
from deepedge.service.config import ServiceSettings
from deepedge.service.manifest import JobKind, JobManifest
from deepedge.service.records import JobRecord
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore
from deepedge.service.workspace import Workspace

if TYPE_CHECKING:
    from deepedge.controlplane.edge_server_window import EdgeServerWindows
    from deepedge.controlplane.site import Site

GATE_SINCE_SAMPLES = 1_000  # the newest labelled since a version's data that its gate reads:
# the loop scored a ResNet-18 and its rival on all 2,897 in one 47 s step, while its windows
# waited (at 1,000, with a fifth of the answers told apart, a difference's 95 % interval is
# about +-0.03)

log = logging.getLogger(__name__)

D, V = DeploymentStatus, VersionStatus
Data = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class Updates:
    """The version-in-progress half of the control plane (module docstring)."""

    def __init__(
        self,
        store: JobStore,
        settings: ServiceSettings,
        site: Callable[[], Site],
        tick_lock: threading.Lock,
        wake_manager: Callable[[], None],
    ) -> None:
        self.store = store
        self.deployments = DeploymentStore(store)
        self.settings = settings
        self.workspace = Workspace(settings.data_dir)
        self.site = site
        self.tick_lock = tick_lock
        self.wake_manager = wake_manager
        self._host_gpus = settings.host_gpus
        self.edge: EdgeServerWindows | None = None  # (set by the loop: shares are recorded)

    def host_gpus(self) -> int:
        """GPUs of the service's host (an edge server's window asks the quota for GPUs
        there, for cores elsewhere)."""
        if self._host_gpus is None:
            import torch

            self._host_gpus = torch.cuda.device_count()
        return self._host_gpus

    def artifact(self, deployment: DeploymentRecord, number: int) -> Path:
        return artifact_path(self.settings.data_dir, deployment, number)

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

    def canary_nodes(self, deployment: DeploymentRecord) -> list[str]:
        """Where a canary of the deployment serves: its canary nodes that are up (a live
        target's alive agents; none alive: the deployment's alive nodes)."""
        spec = deployment.spec
        nodes = spec.canary_nodes()
        if not spec.target.live or self.settings.ray_address is None:
            return nodes
        try:
            alive = {n.node_id for n in self.live_nodes().alive()}
        except DeepEdgeError:
            return []
        up = [n for n in nodes if n in alive]
        return up or [n for n in spec.target.nodes if n in alive][:1]

    # -- training ---------------------------------------------------------------------------

    def training_data(self, deployment: DeploymentRecord, version: ModelVersion) -> Data:
        """The labelled live samples of the version's windows, split into training and
        held-out data (deterministic, so a restarted service stages exactly the same
        files); the newest ``MAX_UPDATE_SAMPLES`` at most."""
        split = self._split(deployment, version)
        return split.data(split.train), split.data(split.val)

    def held_out_unseen(self, deployment: DeploymentRecord, version: ModelVersion,
                        rival: int | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The version's held-out samples that ``rival`` did not train on either: a rival
        scored on samples it learned (its windows overlap the candidate's) reads high, and
        the gate would keep what serves however much better the candidate is."""
        split = self._split(deployment, version)
        other = self.deployments.version(deployment.id, rival) if rival is not None else None
        if other is None or not other.data_windows or other.number == version.number:
            return split.data(split.val)
        seen = self._split(deployment, other)
        return split.data(unseen(split.ids, split.val, seen.ids[seen.train]))

    def labelled_since(self, deployment: DeploymentRecord,
                       version: ModelVersion) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The uniformly labelled samples served since the version's newest training
        window (the newest :data:`GATE_SINCE_SAMPLES`): its gate's samples when its parent
        no longer serves. A kept version that serves again was put back because the inputs
        changed (a condition came back), or the parent was rolled back; either way the
        version learned windows that are not what comes now, and its held-out split would
        judge it on them (against a rival that may never have seen that condition)."""
        due = {w.window: w.due_at for w in self.deployments.windows(deployment.id)}
        newest = [due[w] for w in version.data_windows if w in due]
        start = max(newest) if newest else math.inf
        samples = [s for s in self.site().samples.window(deployment.id, start, math.inf)
                   if s.label is not None and s.label_source not in CHOSEN_SOURCES]  # fmt: skip
        samples = samples[-GATE_SINCE_SAMPLES:]  # the newest: what comes now
        if not samples:
            return np.zeros((0,), dtype=np.float32), np.zeros(0, dtype=np.int64)
        x = np.stack([s.input for s in samples]).astype(np.float32)
        return x, np.asarray([s.label for s in samples], dtype=np.int64)

    def _split(self, deployment: DeploymentRecord, version: ModelVersion) -> Split:
        spec = deployment.spec
        due = {w.window: w.due_at for w in self.deployments.windows(deployment.id)}
        labelled = [s for w in version.data_windows if w in due
                    for s in self.site().samples.window(deployment.id, due[w] - spec.window_s,
                                                        due[w])
                    if s.label is not None][-MAX_UPDATE_SAMPLES:]  # fmt: skip
        if labelled:
            x = np.stack([s.input for s in labelled]).astype(np.float32)
        else:
            x = np.zeros((0,), dtype=np.float32)
        y = np.asarray([s.label for s in labelled], dtype=np.int64)
        ids = np.asarray([s.request_id for s in labelled], dtype=object)
        order = np.random.default_rng([spec.stream.seed, version.number]).permutation(len(y))
        n_val = max(1, round(spec.update.validation_fraction * len(y))) if len(y) else 0
        return Split(ids, x, y, order[n_val:], order[:n_val])

    def submit(self, deployment: DeploymentRecord, version: ModelVersion) -> None:
        """The version's ``model-update`` job, its data and parent staged (module text)."""
        spec = deployment.spec
        train, val = self.training_data(deployment, version)
        if len(train[1]) < MIN_UPDATE_SAMPLES:  # (the trigger waits for samples; a restart
            # or a retention that evicted them can still leave too few)
            windows = list(version.data_windows)
            self.job_failed(deployment, version, f"only {len(train[1])} training samples in "
                            f"windows {windows}; need {MIN_UPDATE_SAMPLES}")  # fmt: skip
            return
        nodes, note = self._update_nodes(deployment, version)
        if nodes is None:
            return
        data_mb = (train[0].nbytes + val[0].nbytes) / (1 << 20)
        request = self.learner_request(spec.update.resources, data_mb)
        kind, document = JobKind.MODEL_UPDATE, model_update_job(spec, len(train[1]), nodes)
        manifest = JobManifest.model_validate({
            "name": f"{deployment.name}-v{version.number}",
            "kind": kind,
            # sized against Ray's object store (update_resources); training yields the CPU
            # to the service (the control loop scores every deployment's windows)
            "resources": {"cpus": request.cpus, "gpus": request.gpus,
                          "mem_mb": request.mem_mb, "nice": 5},
            "checkpoint_interval_s": 30,
            "restart_limit": 2,
            "retry_limit": 2,
            "spec": {"document": document},
        })  # fmt: skip
        tenant = self.store.tenant(deployment.tenant_id)
        key = f"deployment-{deployment.id}-v{version.number}"
        parent = self.artifact(deployment, version.parent or 0)
        with self.tick_lock:
            job, _ = self.store.submit(tenant, manifest, idempotency_key=key)
            self.stage(job.tenant_id, job.id, train, val, parent)
        self.wake_manager()
        trigger_window = max(version.data_windows)
        due = self.deployments.recent_window_due_at(deployment.id, trigger_window)
        resources = {"cpus": request.cpus, "gpus": request.gpus, "mem_mb": request.mem_mb,
                     "mem_mb_derived": request.derived,
                     "object_store_mb": request.object_store_mb}  # fmt: skip
        self.deployments.commit(deployment, Step(
            deployment={"current_job_id": job.id},
            versions=(VersionChange(version.number, job_id=job.id),),
            events=(Event(EventKind.JOB_SUBMITTED,
                          f"{kind.value} job {job.id} trains v{version.number} from "
                          f"v{version.parent} on windows {list(version.data_windows)}{note}",
                          window=trigger_window, version=version.number, job_id=job.id,
                          detail={"window_due_at": due, "samples": len(train[1]) + len(val[1]),
                                  "nodes": nodes, "live": spec.target.live,
                                  "resources": resources}),),
        ))  # fmt: skip

    def _update_nodes(
        self, deployment: DeploymentRecord, version: ModelVersion
    ) -> tuple[list[str] | None, str]:
        """The nodes the update trains on (None: none alive, the version failed) and what
        the event says of them."""
        target = deployment.spec.target
        nodes, note = list(target.nodes), ""
        if target.live and target.follows_selector:  # what it matches now
            now_nodes = selected_now(target, self.live_nodes())
            if not now_nodes:
                what = "its selector matches" if target.selector else "there is"
                self.job_failed(deployment, version, f"{what} no alive agent of the cluster")
                return None, ""
            return now_nodes, selection_note(nodes, now_nodes)
        if target.live:  # the named nodes that are alive now; none: nothing to train on
            alive = {n.node_id for n in self.live_nodes().alive()}
            gone = [n for n in nodes if n not in alive]
            nodes = [n for n in nodes if n in alive]
            if not nodes:
                self.job_failed(deployment, version, f"none of its nodes ({', '.join(gone)}) "
                                "is an alive agent of the cluster")  # fmt: skip
                return None, ""
            note = f" ({', '.join(gone)} not alive: trains without)" if gone else ""
        return nodes, note

    def stage(self, tenant_id: str, job_id: str, train: tuple[np.ndarray, np.ndarray],
              val: tuple[np.ndarray, np.ndarray], parent: Path) -> None:  # fmt: skip
        work = self.workspace.job_dir(tenant_id, job_id).work
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / "train.tmp.npz"
        np.savez(tmp, x_train=train[0], y_train=train[1], x_val=val[0], y_val=val[1])
        tmp.replace(work / TRAIN_FILE)
        (work / PARENT_FILE).write_bytes(parent.read_bytes())

    def follow(self, deployment: DeploymentRecord, version: ModelVersion) -> None:
        """Where the version's job stands: registered once it completed, failed with it,
        restaged if a crash came between its submission and its files."""
        assert version.job_id is not None
        try:
            job = self.store.get(version.job_id)
        except NotFoundError:
            self.job_failed(deployment, version, "its job was deleted")
            return
        if job.status is JobStatus.COMPLETED:
            self.register(deployment, version, job)
        elif job.status in {JobStatus.FAILED, JobStatus.HALTED}:
            self.job_failed(deployment, version, job_ended(job, self.store.history(job.id)))
        elif job.status in {JobStatus.QUEUED, JobStatus.PENDING}:
            work = self.workspace.job_dir(job.tenant_id, job.id).work
            if self.edge is not None and self.edge.restage_if_missing(job):
                return
            if not (work / TRAIN_FILE).exists():  # a crash between submit and staging
                train, val = self.training_data(deployment, version)
                parent = self.artifact(deployment, version.parent or 0)
                with self.tick_lock:
                    self.stage(job.tenant_id, job.id, train, val, parent)

    def halt(self, version: ModelVersion) -> None:
        """Ask the job training ``version`` to halt (the version was cancelled: a drift
        overtook its routine update: :func:`recovery.overtaken_update`, never an edge
        server's window)."""
        if version.job_id is None:
            return
        try:
            asked = halt_job(self.store, version.job_id)
        except NotFoundError:
            return
        if asked:
            self.wake_manager()

    def job_failed(self, deployment: DeploymentRecord, version: ModelVersion, why: str) -> None:
        self.deployments.commit(deployment, Step(
            deployment={"status": D.ACTIVE, "current_job_id": None},
            versions=(VersionChange(version.number, V.FAILED),),
            events=(Event(EventKind.JOB_FAILED, f"v{version.number} not trained: {why}",
                          version=version.number, job_id=version.job_id),),
        ))  # fmt: skip

    # -- registering and gating ---------------------------------------------------------

    def register(self, deployment: DeploymentRecord, version: ModelVersion, job: JobRecord) -> None:
        """Keep the job's model as the version's artifact, then gate it on the held-out
        golden-labelled split of its own training windows against what serves."""
        assert version.job_id is not None
        job_dir = self.workspace.job_dir(deployment.tenant_id, version.job_id)
        result = read_json(job_dir.results / "result.json")
        ekya = ekya_allocation(deployment.name, deployment.spec.target.nodes[0], version.number,
                               max(version.data_windows), version.job_id, result)  # fmt: skip
        if ekya is not None and self.edge is not None:
            self.edge.record_inference_shares(job, result)
        try:
            model_bytes = result_model(job_dir, deployment.name if ekya is not None else None)
        except OSError as exc:  # a link, or not a regular file: never followed
            self.job_failed(deployment, version, f"job {version.job_id}'s model: {exc}")
            return
        if model_bytes is None and ekya is not None:  # the window retrained another stream
            self.deployments.commit(deployment, Step(
                deployment={"status": D.ACTIVE, "current_job_id": None},
                versions=(VersionChange(version.number, V.CANCELLED,
                                        metrics={"ekya_retrained": 0.0}),),
                events=(ekya,),
            ))  # fmt: skip
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
        # The candidate would replace what serves now: normally its parent, but a rollback
        # during its training may have put an older version back.
        rival = deployment.serving_version or version.parent
        basis = ""
        if version.parent is not None and rival != version.parent:
            x_val, y_val = self.labelled_since(deployment, version)
            basis = (f"; v{version.parent}, which it learned from, no longer serves: gated on "
                     f"the {len(y_val)} samples labelled since its data")  # fmt: skip
        else:
            x_val, y_val = self.held_out_unseen(deployment, version, rival)
        comparison = self._compare(deployment, version.number, rival, x_val, y_val)
        metrics = _gate_metrics(comparison, len(y_val))
        outcome = stream_outcome(deployment.name, result)
        for key, name in (("final_accuracy", "job_final_accuracy"),
                          ("estimated_accuracy", "ekya_estimated_accuracy"),
                          ("validation_accuracy", "job_validation_accuracy")):  # fmt: skip
            if isinstance(outcome.get(key), float):
                metrics[name] = outcome[key]
        phases = update_phases(result)
        executor = result.get("executor")
        took = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
        how = f" (on {executor}: {took})" if executor and phases else ""
        ran = {"executor": executor, "phases_s": phases} if phases else {}
        events = [Event(EventKind.VERSION_REGISTERED,
                        f"v{version.number} registered from job {version.job_id}{how}{basis}",
                        version=version.number, job_id=version.job_id, detail=ran)]  # fmt: skip
        allocation = _allocation_event(version, result) if ekya is None else ekya
        if allocation is not None:
            events.append(allocation)
        changes = [VersionChange(version.number, V.CANDIDATE, metrics=metrics)]
        self.deployments.commit(deployment, gate(
            Policy.of(deployment.spec), deployment, version, comparison, rival, changes, events,
            self.canary_nodes(deployment)))  # fmt: skip

    def _compare(self, deployment: DeploymentRecord, number: int, rival: int | None,
                 images: np.ndarray, labels: np.ndarray) -> PairedComparison | None:  # fmt: skip
        """Version ``number`` against ``rival`` on the same labelled samples (None: no
        rival, or no samples)."""
        if rival is None or len(labels) == 0:
            return None
        site = self.site()
        mine = site.predictions(deployment, self.artifact(deployment, number), images)
        theirs = site.predictions(deployment, self.artifact(deployment, rival), images)
        return compare_paired(mine == labels, theirs == labels, deployment.spec.gate.confidence)

    def judge_upload(self, deployment: DeploymentRecord, version: ModelVersion, now: float) -> None:
        """An operator-registered version: its upload loaded into the deployment's model
        and written as the version first (one that does not load is rejected), then gated on
        the newest window's golden-labelled sample (which no version trained on), unless the
        operator skipped the gate."""
        if not self._store_upload(deployment, version):
            return
        if not self._servable(deployment, version, []):
            return
        policy = Policy.of(deployment.spec)
        skip_canary = bool(version.metrics.get("skip_canary"))
        nodes = self.canary_nodes(deployment)
        if version.metrics.get("skip_gate"):
            events = [Event(EventKind.GATE_PASSED, f"v{version.number}: gate skipped by the "
                            "operator", version=version.number)]  # fmt: skip
            self.deployments.commit(deployment, rollout(policy, deployment, version.number, [],
                                                        events, nodes, skip_canary))  # fmt: skip
            return
        site, spec = self.site(), deployment.spec
        newest = self.deployments.windows(deployment.id, 1)
        window = site.traffic(
            deployment, newest[0].window, newest[0].due_at - spec.window_s, newest[0].due_at,
            now,
        ) if newest else site.traffic(deployment, 0, now, now, now)  # fmt: skip
        comparison = self._compare(deployment, version.number, version.parent, window.images,
                                   window.labels)  # fmt: skip
        changes = [
            VersionChange(version.number, metrics=_gate_metrics(comparison, len(window.labels)))
        ]
        self.deployments.commit(deployment, gate(policy, deployment, version, comparison,
                                                 version.parent, changes, [], nodes,
                                                 skip_canary))  # fmt: skip

    def _servable(self, deployment: DeploymentRecord, version: ModelVersion,
                  changes: Sequence[VersionChange]) -> bool:  # fmt: skip
        """Export the version for serving; a model that cannot be served (no export, or
        one the serving check refuses, or that answers otherwise) is REJECTED."""
        try:
            self.site().export(deployment, self.artifact(deployment, version.number))
        except DeepEdgeError as exc:
            n = version.number
            self.deployments.commit(deployment, Step(
                deployment={"status": D.ACTIVE, "current_job_id": None},
                versions=(*changes, VersionChange(n, V.REJECTED)),
                events=(Event(EventKind.GATE_FAILED, f"v{n} cannot be served: {exc.message}",
                              version=n),),
            ))  # fmt: skip
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


@dataclass(frozen=True)
class Split:
    """A version's labelled samples (``ids``, ``x``, ``y``, oldest first) and the indices
    of its training and held-out parts."""

    ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train: np.ndarray
    val: np.ndarray

    def data(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[index], self.y[index]


def unseen(ids: np.ndarray, held_out: np.ndarray, trained: np.ndarray) -> np.ndarray:
    """The indices of ``held_out`` whose sample ids are not among ``trained``."""
    known = set(trained.tolist())
    return np.asarray([i for i in held_out if ids[i] not in known], dtype=np.int64)


def _gate_metrics(comparison: PairedComparison | None, held_out: int) -> dict[str, float]:
    metrics = {"held_out_samples": float(held_out)}
    if comparison is not None:
        metrics.update({GATE_ACCURACY: comparison.a_accuracy,
                        PARENT_GATE_ACCURACY: comparison.b_accuracy,
                        GATE_DIFF_LOW: comparison.low,
                        "gate_diff_high": comparison.high})  # fmt: skip
    return metrics


def _allocation_event(version: ModelVersion, result: dict[str, Any]) -> Event | None:
    """Where a Deep-Edge update trained (its plan's selected workers), as an event."""
    allocation = deep_edge_allocation(result)
    if not allocation:
        return None
    keys = ("live", "planned_on", "ps_node", "workers_ran_on", "placements")
    live: dict[str, Any] = {k: result[k] for k in keys if k in result}
    return Event(EventKind.ALLOCATION, f"v{version.number} trained on "
                 f"{', '.join(a['node'] for a in allocation if a['selected'])}"
                 f"{live_allocation_text(result)}",
                 window=max(version.data_windows), version=version.number,
                 job_id=version.job_id, detail={"workers": allocation,
                 "policy": result.get("plan", {}).get("policy"), **live})  # fmt: skip
