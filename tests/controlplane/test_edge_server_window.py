"""One Ekya window per edge server (controlplane/edge_server_window.py), in the control loop on a
real store and real digits windows, with time injected: deployments on one edge server that
trigger together share ONE ``ekya-window`` job (the others enter it inference only), a
trigger during the window waits for the next one, a service killed between submitting the
window and recording it carries on with the same job, and every deployment's share of the
decision is recorded. Jobs are finished by the test (as in test_control_plane.py): it
trains each retraining stream's staged data from its staged weights and writes the result a
joint window's learner writes; the real learner (Thief, Ray) runs in
test_control_plane_ekya.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _traffic import LiveTrafficPlane

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.edge_server_window import EdgeServerWindows, window_document
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import EventKind
from deepedge.controlplane.rollout_actions import request_update, stop
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.core.errors import ConflictError
from deepedge.learning.model_state import load_model_file, save_model_file
from deepedge.learning.models import make_edge_model
from deepedge.learning.training import train_epochs
from deepedge.service.config import ServiceSettings
from deepedge.service.manifest import JobKind
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore, manifest_of

EDGE: dict[str, Any] = {
    "labeller": "ground-truth",
    "window_s": 1.0,
    "target": {"kind": "edge-server", "gpus": 2.0, "inference_gpus": 0.4},
    "stream": {"window_size": 120, "onset_window": 2, "ramp_windows": 1},
    "base_windows": 1,
    "base_epochs": 3,
    "update": {"policy": "ekya-window", "label_fraction": 1.0, "recent_windows": 1},
    "trigger": {
        "sample_count": None,
        "accuracy_threshold": 0.0,
        "cooldown_windows": 0,
    },  # on request only
    # this test is about the window, not the verdicts: the gate passes anything, and the
    # canary is decided after its one window
    "canary": {"fraction": 0.5, "windows": 1, "max_windows": 1},
    "gate": {"min_gain": -1.0},
}
NAMES = ("cam-a", "cam-b", "cam-c")


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", host_gpus=0, traffic_settle_s=0.0)
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def finish_window(plane: ControlPlane, job_id: str, retrain: tuple[str, ...]) -> dict[str, Any]:
    """What the joint window's learner writes: the retrained weights of the streams in
    ``retrain`` and one plan over all streams (shares: half of the server to retraining)."""
    job = plane.store.get(job_id)
    spec = window_document(job)
    assert spec is not None
    job_dir = plane.workspace.job_dir(job.tenant_id, job.id)
    (job_dir.results / "weights").mkdir(parents=True, exist_ok=True)
    decisions, outcomes = [], {}
    for stream in spec.streams:
        retrains = stream.stream_id in retrain
        decisions.append({"stream_id": stream.stream_id, "inference_config": "r500",
                          "inference_gpus": 0.3, "retraining_config": "e1-f100-z0"
                          if retrains else None, "retraining_gpus": 0.6 if retrains else 0.0,
                          "window_accuracy": 0.8})  # fmt: skip
        if stream.train_data is None:
            continue
        outcomes[stream.stream_id] = {"retrained": "e1-f100-z0" if retrains else None,
                                      "configs": []}  # fmt: skip
        if retrains:
            staged = np.load(job_dir.work / stream.train_data)
            model = load_model_file(make_edge_model(10, 16, 8, 0),
                                    job_dir.work / stream.initial_weights)  # fmt: skip
            train_epochs(model, staged["x_train"], staged["y_train"], 4)
            save_model_file(model, job_dir.results / "weights" / f"{stream.stream_id}.pt")
    plan = {"gpus": spec.gpus, "window_s": spec.window_s, "streams": decisions}
    result = {"scheduler": "thief", "device": "cpu", "edge_server": spec.edge_server,
              "gpus": spec.gpus, "plans": [plan], "streams": outcomes}  # fmt: skip
    (job_dir.results / "result.json").write_text(json.dumps(result))
    for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING,
                   JobStatus.STORING, JobStatus.COMPLETED):  # fmt: skip
        plane.store.transition(job_id, status, "finished by the test")
    return result


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_deployments_on_one_edge_server_share_one_window_and_survive_a_restart(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    ids = {}
    for k, name in enumerate(NAMES):
        spec = DeploymentSpec.model_validate({**EDGE, "name": name, "stream": {
            **EDGE["stream"], "seed": k}})  # fmt: skip
        ids[name] = plane.deployments.create(tenant.id, spec, now=0.0)[0].id
    for now in range(4):  # first versions (one per tick) and a few windows
        plane.tick(float(now))
    assert all(plane.deployments.get_by_id(i).serving_version == 1 for i in ids.values())
    for name in ("cam-a", "cam-b"):
        request_update(plane.deployments, tenant.id, name)
    plane.tick(4.0)  # both trigger; the server's window opens one stream window later
    assert not [j for j in plane.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    # The service dies after submitting the window, before recording it on the versions.
    crash = pytest.MonkeyPatch()
    crash.setattr(EdgeServerWindows, "_record_submitted",
                  lambda *_: (_ for _ in ()).throw(RuntimeError("killed")))  # fmt: skip
    plane.tick(5.0)
    crash.undo()
    (job,) = [j for j in plane.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    waiting = [plane.deployments.version(ids[n], 2) for n in ("cam-a", "cam-b")]
    assert all(v.status is VersionStatus.TRAINING and v.job_id is None for v in waiting)
    work = plane.workspace.job_dir(tenant.id, job.id).work
    staged = {f: _digest(work / f) for f in ("cam-a.train.npz", "cam-c.weights.pt")}
    for lost in staged:
        (work / lost).unlink()

    # A restarted service adopts that job (same idempotency key); no second window.
    again = LiveTrafficPlane(plane.store, plane.settings, first_versions_inline=True)
    again.tick(6.0)
    jobs = [j for j in again.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    assert [j.id for j in jobs] == [job.id]
    for name in ("cam-a", "cam-b"):
        v2 = again.deployments.version(ids[name], 2)
        trigger = again.deployments.last_event(ids[name], EventKind.TRIGGER)
        assert trigger is not None and trigger.detail["trigger"] == "request"
        # the trigger's window, and before it those of v1's condition while the inputs
        # still look like what v1 learned (transitions.lineage_windows)
        since = tuple(range(v2.data_windows[0], trigger.window + 1))
        assert v2.job_id == job.id and v2.parent == 1 and v2.data_windows == since
        assert again.deployments.get_by_id(ids[name]).current_job_id == job.id
    assert {f: _digest(work / f) for f in staged} == staged  # restaged, identical
    spec = window_document(again.store.get(job.id))
    assert spec is not None and spec.edge_server == "edge-1" and spec.gpus == 2.0
    by_id = {s.stream_id: s for s in spec.streams}
    assert sorted(by_id) == list(NAMES)
    assert [by_id[n].version for n in NAMES] == [2, 2, None]  # cam-c: inference only
    assert [by_id[n].weights_version for n in NAMES] == [1, 1, 1]
    assert by_id["cam-c"].train_data is None and (work / by_id["cam-c"].initial_weights).exists()
    # ... at its accuracy on the window scored in the tick that submitted the window
    (scored,) = [w for w in again.deployments.windows(ids["cam-c"]) if w.at == 5.0]
    assert by_id["cam-c"].current_accuracy == pytest.approx(scored.accuracy)
    # The window asks the tenant's quota for the server: its cores on a host without GPUs.
    resources = manifest_of(again.store.get(job.id)).resources
    assert resources.cpus == 2.0 and resources.gpus == 0

    # cam-c triggers while the window runs: it waits for the server's next window.
    request_update(again.deployments, tenant.id, "cam-c")
    again.tick(7.0)
    c_v2 = again.deployments.version(ids["cam-c"], 2)
    assert c_v2.status is VersionStatus.TRAINING and c_v2.job_id is None
    assert len([j for j in again.store.list_jobs(tenant.id)
                if j.kind == JobKind.EKYA_WINDOW]) == 1  # fmt: skip

    finish_window(again, job.id, retrain=("cam-a", "cam-b"))
    again.tick(8.0)  # registers both; cam-c's trigger (7.0) has waited one window: it starts
    again.tick(9.0)  # the canaries' window (traffic reaches a canary once it is serving)
    for name in ("cam-a", "cam-b"):  # each through the gate and its canary (one window)
        v2 = again.deployments.version(ids[name], 2)
        assert "gate_accuracy" in v2.metrics and v2.status in {
            VersionStatus.SERVING,
            VersionStatus.ROLLED_BACK,
        }
        kinds = [e.kind for e in again.deployments.events(ids[name]) if e.version == 2]
        assert kinds.index(EventKind.GATE_PASSED) < kinds.index(EventKind.CANARY_STARTED)
        assert again.artifact(again.deployments.get_by_id(ids[name]), 2).exists()
    allocations = {n: again.deployments.last_event(ids[n], EventKind.ALLOCATION) for n in NAMES}
    assert all(e is not None and e.job_id == job.id for e in allocations.values())
    assert [allocations[n].detail["stream"] for n in NAMES] == list(NAMES)  # type: ignore[union-attr]
    assert allocations["cam-c"].detail["inference_only"]  # type: ignore[union-attr]
    assert allocations["cam-a"].detail["streams"] == allocations["cam-c"].detail["streams"]  # type: ignore[union-attr]
    # The next window: cam-c retrains, cam-a and cam-b infer only.
    c_v2 = again.deployments.version(ids["cam-c"], 2)
    assert c_v2.job_id is not None and c_v2.job_id != job.id
    nxt = window_document(again.store.get(c_v2.job_id))
    assert nxt is not None
    assert {s.stream_id: s.version for s in nxt.streams} == {"cam-c": 2, "cam-a": None,
                                                               "cam-b": None}  # fmt: skip
    # Stopping one deployment leaves the window running for the others.
    stop(again.deployments, tenant.id, "cam-a")
    assert again.store.get(c_v2.job_id).requested_action is None
    stop(again.deployments, tenant.id, "cam-c")
    assert again.store.get(c_v2.job_id).requested_action == "HALT"


@pytest.mark.parametrize(
    ("change", "reason"),
    [({"target": {"kind": "edge-server", "gpus": 4.0}}, "GPU"), ({}, "another tenant")],
)
def test_an_edge_server_is_one_tenants_with_one_gpu_count(
    plane: ControlPlane, change: dict[str, Any], reason: str
) -> None:
    alice = plane.store.create_tenant("alice", "a", max_cores=64)
    bob = plane.store.create_tenant("bob", "b", max_cores=64)
    plane.deployments.create(alice.id, DeploymentSpec.model_validate({**EDGE, "name": "cam-a"}))
    second = DeploymentSpec.model_validate({**EDGE, "name": "cam-b", **change})
    who = alice if change else bob
    with pytest.raises(ConflictError, match=reason):
        plane.deployments.create(who.id, second)


def test_a_window_over_the_gpu_quota_fails_the_waiting_versions(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """On a host with GPUs the window asks for the server's GPUs; a tenant without a GPU
    quota has its versions FAILED with the reason, and the deployment serves on."""
    settings = ServiceSettings(data_dir=tmp_path / "data", host_gpus=1, traffic_settle_s=0.0)
    plane = LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)
    tenant = plane.store.create_tenant("t", "tok", max_cores=64, max_gpus=1)
    spec = DeploymentSpec.model_validate({**EDGE, "name": "cam-a"})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    for now in range(2):
        plane.tick(float(now))
    request_update(plane.deployments, tenant.id, "cam-a")
    plane.tick(2.0)  # triggers
    plane.tick(3.0)  # the window: 2 GPUs asked, 1 allowed
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.status is VersionStatus.FAILED
    failed = plane.deployments.last_event(deployment.id, EventKind.JOB_FAILED)
    assert failed is not None and "refused" in failed.message and "2 GPUs" in failed.message
    assert plane.deployments.get_by_id(deployment.id).serving_version == 1
    assert plane.store.list_jobs(tenant.id) == []


def test_a_window_recorded_on_some_versions_only_is_recorded_on_the_rest(
    plane: ControlPlane,
) -> None:
    """The service dies after recording the window on the first waiting version only: the
    next tick sees the server's window running and records it on the other version too
    (rather than leaving it waiting for a window that already trains it)."""
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    ids = {}
    for k, name in enumerate(NAMES[:2]):
        spec = DeploymentSpec.model_validate({**EDGE, "name": name, "stream": {
            **EDGE["stream"], "seed": k}})  # fmt: skip
        ids[name] = plane.deployments.create(tenant.id, spec, now=0.0)[0].id
    for now in range(3):
        plane.tick(float(now))
    for name in NAMES[:2]:
        request_update(plane.deployments, tenant.id, name)
    plane.tick(3.0)  # both trigger
    record = EdgeServerWindows._record_submitted
    crash = pytest.MonkeyPatch()

    def first_only(self: EdgeServerWindows, job: Any, spec: Any) -> None:
        first = spec.model_copy(update={"streams": spec.retraining()[:1]})
        record(self, job, first)
        raise RuntimeError("killed")

    crash.setattr(EdgeServerWindows, "_record_submitted", first_only)
    plane.tick(4.0)
    crash.undo()
    recorded = {n: plane.deployments.version(ids[n], 2).job_id for n in NAMES[:2]}
    (job_id,) = [j for j in recorded.values() if j is not None]  # one of the two
    plane.tick(5.0)
    assert all(plane.deployments.version(ids[n], 2).job_id == job_id for n in NAMES[:2])
    jobs = [j for j in plane.store.list_jobs(tenant.id) if j.kind == JobKind.EKYA_WINDOW]
    assert [j.id for j in jobs] == [job_id]
