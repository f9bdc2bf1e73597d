"""A deployment on the edge server (update policy ``ekya-window``) end to end in the control
loop: drift -> an ``ekya-window`` job whose real learner (Thief, the micro-profiler and the
edge server's Ray actors, on a small digits stream) retrains the model -> its decision
recorded as the window's allocation -> a registered version with its lineage -> gate,
canary, promotion -> automatic rollback of a bad version. Only the job manager is left out:
the test runs each job's learner in-process and moves the job through the real transition
table, as the manager would."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _traffic import LiveTrafficPlane

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import EventKind
from deepedge.controlplane.rollout_status import LIVE_VERSIONS, VersionStatus
from deepedge.service import learner
from deepedge.service.config import ServiceSettings
from deepedge.service.manifest import JobKind
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore, manifest_of

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EDGE: dict[str, Any] = {
    "name": "edge-cam",
    "labeller": "ground-truth",
    "window_s": 1.0,
    "target": {"kind": "edge-server", "gpus": 1.0, "inference_gpus": 0.4},
    "stream": {"window_size": 120, "onset_window": 3, "ramp_windows": 1},
    "update": {"policy": "ekya-window", "label_fraction": 1.0, "retraining_window_s": 600},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.8, "cooldown_windows": 0},
    "canary": {"fraction": 0.5, "windows": 1},
}


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0)
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def run_learner(plane: ControlPlane, job_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the manager does with a queued job: its learner in the job's work folder, then
    COMPLETED (or FAILED) through the transition table."""
    job = plane.store.get(job_id)
    manifest = manifest_of(job)
    job_dir = plane.workspace.job_dir(job.tenant_id, job.id)
    document = job_dir.work / "document.json"
    document.write_text(json.dumps(manifest.spec.document))
    with monkeypatch.context() as m:
        m.chdir(job_dir.work)
        m.setenv("DEEPEDGE_RESULTS_DIR", str(job_dir.results))
        m.setenv("DEEPEDGE_CHECKPOINT_DIR", str(job_dir.root / "checkpoints"))
        code = learner.main(["--kind", manifest.kind.value, "--document", str(document),
                             "--results", str(job_dir.results)])  # fmt: skip
    final = JobStatus.COMPLETED if code == 0 else JobStatus.FAILED
    for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING,
                   JobStatus.STORING, final):  # fmt: skip
        plane.store.transition(job.id, status, "run by the test")


def run_windows(
    plane: ControlPlane, start: int, stop: int, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    ran = []
    for now in range(start, stop):
        plane.tick(float(now))
        for deployment in plane.deployments.live():
            job_id = deployment.current_job_id
            if job_id and plane.store.get(job_id).status is JobStatus.QUEUED:
                run_learner(plane, job_id, monkeypatch)
                ran.append(job_id)
    return ran


def test_ekya_windows_on_the_edge_server_update_gate_and_promote(
    plane: ControlPlane, ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate(EDGE)
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    jobs: list[str] = []
    for now in range(10):  # until v2 has its verdict, and one window more
        jobs += run_windows(plane, now, now + 1, monkeypatch)
        numbers = {v.number: v.status for v in plane.deployments.versions(deployment.id)}
        if numbers.get(2, VersionStatus.TRAINING) not in LIVE_VERSIONS:
            jobs += run_windows(plane, now + 1, now + 2, monkeypatch)
            break
    assert jobs, [(w.window, w.accuracy) for w in plane.deployments.windows(deployment.id)]
    first = plane.store.get(jobs[0])
    assert first.kind == JobKind.EKYA_WINDOW and first.status is JobStatus.COMPLETED
    versions = {v.number: v for v in plane.deployments.versions(deployment.id)}
    v2 = versions[2]
    assert v2.parent == 1 and v2.job_id == jobs[0]  # lineage: parent, job, data windows
    trigger = next(e for e in plane.deployments.events(deployment.id)
                   if e.kind is EventKind.TRIGGER)  # fmt: skip
    # the drift's windows up to the trigger's (the level before it needs six windows: the
    # first windows' drop is told against the threshold alone)
    assert v2.data_windows and v2.data_windows[-1] == trigger.window
    allocation = next(e for e in plane.deployments.events(deployment.id)
                      if e.kind is EventKind.ALLOCATION)  # fmt: skip
    detail = allocation.detail
    assert detail["policy"] == "ekya-window" and detail["scheduler"] == "thief"
    assert allocation.window == trigger.window and allocation.version == 2
    (stream,) = detail["streams"]
    assert stream["stream_id"] == "edge-cam"
    # Thief's shares never exceed the server's GPUs; it retrained with a profiled config.
    assert 0 < stream["inference_gpus"] + stream["retraining_gpus"] <= detail["gpus"] + 1e-9
    assert stream["retraining_config"] in {c["name"] for c in detail["configs"]}
    assert detail["retrained"] == stream["retraining_config"]
    assert 0.0 <= v2.metrics["ekya_estimated_accuracy"] <= 1.0
    # The gate ran on the control plane's held-out split against v1, then the rollout.
    assert "gate_accuracy" in v2.metrics and "parent_gate_accuracy" in v2.metrics
    kinds = [e.kind for e in plane.deployments.events(deployment.id) if e.version == 2]
    assert EventKind.GATE_PASSED in kinds or EventKind.GATE_FAILED in kinds
    if EventKind.GATE_PASSED in kinds:  # a canary, or at once: a drop's update shown better
        assert EventKind.CANARY_STARTED in kinds or (
            v2.metrics.get("recovery_update") and EventKind.PROMOTED in kinds)
        assert v2.status in {VersionStatus.CANARY, VersionStatus.SERVING,
                             VersionStatus.RETIRED, VersionStatus.ROLLED_BACK}  # fmt: skip
        if EventKind.PROMOTED in kinds:  # then it served (until a rollback, if any)
            served = [w.served_version for w in plane.deployments.windows(deployment.id)]
            assert served[0] == 1 and 2 in served
            assert (v2.status is VersionStatus.ROLLED_BACK) == (served[-1] == 1)
    else:
        assert v2.status is VersionStatus.REJECTED
    # The retrained weights are the registered version's artifact, scored every window.
    assert plane.artifact(plane.deployments.get_by_id(deployment.id), 2).exists()


def test_a_window_thief_spends_on_inference_alone_cancels_its_version(
    plane: ControlPlane, ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retraining window far too short for any configuration: Thief keeps every GPU for
    inference; the decision is recorded and the version ends CANCELLED, v1 serves on."""
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    short = {**EDGE, "update": {**EDGE["update"], "retraining_window_s": 0.001},
             "trigger": {"sample_count": None, "accuracy_threshold": 1.0,
                         "cooldown_windows": 0}}  # fmt: skip
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(short), 0.0)
    jobs = run_windows(plane, 0, 3, monkeypatch)  # (the window opens a window after the trigger)
    plane.tick(3.0)  # registers what the job decided
    assert jobs
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.status is VersionStatus.CANCELLED and v2.job_id == jobs[0]
    allocation = next(e for e in plane.deployments.events(deployment.id)
                      if e.kind is EventKind.ALLOCATION)  # fmt: skip
    (stream,) = allocation.detail["streams"]
    assert stream["retraining_config"] is None and stream["inference_config"] is not None
    assert allocation.detail["retrained"] is None
    assert plane.deployments.get_by_id(deployment.id).serving_version == 1
    results = plane.workspace.job_dir(tenant.id, jobs[0]).results
    assert not (results / "weights" / "edge-cam.pt").exists()
    assert os.path.exists(plane.workspace.job_dir(tenant.id, jobs[0]).results / "result.json")
    assert "no retraining" in allocation.message


@pytest.mark.parametrize("policy", ["ekya-window", "model-update"])
def test_a_deployment_serves_and_updates_a_users_workload(
    plane: ControlPlane,
    ray_cluster: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    policy: str,
) -> None:
    """A site's own model package and image folder (tests/_workload_helpers.py), as a
    workload file (edge server) or an inline document (nodes): the first version is the
    workload's model trained on its base windows, windows are scored on its data, and an
    update job (the real learner) trains the workload's model, its frozen layers untouched."""
    import numpy as np

    from _workload_helpers import write_images, write_workload
    from deepedge.controlplane.artifacts import load_version
    from deepedge.learning.models import get_flat_weights

    images = tmp_path / "bigger"
    write_images(images, windows=3, per_class=50)
    # At window 2 the site's cameras are rewired: what was red is filed as blue and back
    # (a concept drift no served model survives: only retraining brings the accuracy back).
    (images / "002" / "red").rename(images / "002" / "swap")
    (images / "002" / "blue").rename(images / "002" / "red")
    (images / "002" / "swap").rename(images / "002" / "blue")
    path = write_workload(tmp_path, python_path=[str(tmp_path / "site")],
                          data={"kind": "folder", "root": str(images)})  # fmt: skip
    edge = policy == "ekya-window"
    workload: Any = str(path) if edge else json.loads(path.read_text())
    spec = {
        **EDGE,
        "name": "site-cams",
        "workload": workload,
        # v1 learns window 0; v2 is trained on window 2, the rewired one
        "base_windows": 1,
        "trigger": {
            "sample_count": None,
            "accuracy_threshold": 0.0,
            "period_windows": 3,
            "cooldown_windows": 0,
        },
        "canary": {"fraction": 0.5, "windows": 0},
        "base_epochs": 3,
    }
    spec["update"] = {**EDGE["update"], "recent_windows": 1}
    if not edge:
        spec["target"] = {"kind": "nodes", "nodes": ["tx2-1", "nano-1"]}
        spec["update"] = {"policy": "model-update", "label_fraction": 1.0, "epochs": 2,
                          "recent_windows": 1}  # fmt: skip
    # The loop runs the workload in the tenant's sandbox: its files are granted to it.
    grants = [str(path), str(tmp_path / "site"), str(images)]
    tenant = plane.store.create_tenant("t", "tok", max_cores=64, grants=grants)
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec), 0.0)
    jobs = run_windows(plane, 0, 4, monkeypatch)  # (an edge server's window: one later)
    plane.tick(4.0)  # registers what the job trained
    assert len(jobs) == 1
    job = plane.store.get(jobs[0])
    assert job.kind == policy and job.status is JobStatus.COMPLETED, job.error_message
    document = manifest_of(job).spec.document
    if edge:  # the edge server's window, with this deployment its one stream
        assert document["edge_server"] == "edge-1"
        (document,) = document["streams"]
        assert document["train_data"] == "site-cams.train.npz"
    else:
        assert document["train_data"] == "train.npz"
    assert document["workload"] == workload
    windows = plane.deployments.windows(deployment.id)
    assert [w.window for w in windows][:3] == [0, 1, 2]
    assert all(w.accuracy is not None and w.samples > 0 for w in windows)
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.parent == 1 and v2.job_id == jobs[0] and "gate_accuracy" in v2.metrics
    current = plane.deployments.get_by_id(deployment.id)
    v1_weights = get_flat_weights(load_version(current.spec, plane.artifact(current, 1)))
    v2_weights = get_flat_weights(load_version(current.spec, plane.artifact(current, 2)))
    # The workload's Tiny model: conv 3->4 (3x3) + linear 16->2 = 146 parameters, of which
    # the frozen features (the first 112) never change; the head was retrained.
    assert v1_weights.shape == v2_weights.shape == (146,)
    np.testing.assert_array_equal(v1_weights[:112], v2_weights[:112])
    assert not np.array_equal(v1_weights[112:], v2_weights[112:])
    # Window 2 broke v1 (scored on the workload's own labels); v2 was gated against v1.
    assert windows[2].accuracy is not None and windows[2].accuracy < 0.5
    # The gate's verdict is its own event (a paired test on the held-out samples: a point
    # estimate at or above v1's is not enough); promoted when it passed; window 4 replays
    # the unwired window 1, where v2 (trained on the rewired one) may serve worse than v1
    # and be rolled back at once, or be kept while v1 serves that window again (a kept
    # version: its rollback watch pauses on inputs unlike what v2 learned).
    v2 = plane.deployments.version(deployment.id, 2)
    events = plane.deployments.events(deployment.id)
    kinds = [e.kind for e in events if e.version == 2]
    assert (EventKind.GATE_PASSED in kinds) != (EventKind.GATE_FAILED in kinds), kinds
    if EventKind.GATE_PASSED in kinds:
        assert v2.status in {VersionStatus.SERVING, VersionStatus.ROLLED_BACK,
                             VersionStatus.RETIRED}  # fmt: skip
        assert EventKind.PROMOTED in kinds
        assert (v2.status is VersionStatus.ROLLED_BACK) == (EventKind.ROLLED_BACK in kinds)
        restored = [e for e in events if e.kind is EventKind.PROMOTED and e.version == 1
                    and e.detail.get("restored")]  # fmt: skip
        assert (v2.status is VersionStatus.RETIRED) == bool(restored)
    else:
        assert v2.status is VersionStatus.REJECTED and EventKind.PROMOTED not in kinds


def test_deployments_on_one_edge_server_share_thiefs_window(
    plane: ControlPlane, ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three deployments on edge-1, two asking for an update in the same window: ONE real
    ``ekya-window`` job in which Thief shares the server between both retraining streams
    and the third one's inference; each deployment's allocation event is its share of that
    one decision, the shares sum to at most the server's GPUs, and both retrained versions
    go through the gate and the canary."""
    from deepedge.controlplane.rollout_actions import request_update

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    names = ("cam-a", "cam-b", "cam-c")
    ids = {}
    for k, name in enumerate(names):
        spec = {**EDGE, "name": name, "base_windows": 1, "base_epochs": 3,
                "stream": {**EDGE["stream"], "seed": k, "onset_window": 2},
                "target": {"kind": "edge-server", "gpus": 2.0, "inference_gpus": 0.4},
                "update": {**EDGE["update"], "recent_windows": 1},
                "trigger": {"sample_count": None, "accuracy_threshold": 0.0,
                            "cooldown_windows": 0}}  # fmt: skip
        ids[name] = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec),
                                             0.0)[0].id  # fmt: skip
    run_windows(plane, 0, 4, monkeypatch)
    for name in ("cam-a", "cam-b"):
        request_update(plane.deployments, tenant.id, name)
    jobs = run_windows(plane, 4, 6, monkeypatch)  # both trigger at 4; the window opens at 5
    plane.tick(6.0)  # registers what the window did, gates, starts the canaries
    plane.tick(7.0)  # the canaries' window
    assert len(jobs) == 1
    job = plane.store.get(jobs[0])
    assert job.kind == JobKind.EKYA_WINDOW and job.status is JobStatus.COMPLETED
    events = {n: plane.deployments.last_event(ids[n], EventKind.ALLOCATION) for n in names}
    decisions = {}
    for name, event in events.items():
        assert event is not None and event.job_id == job.id and event.detail["stream"] == name
        assert event.detail["server"] == "edge-1" and event.detail["gpus"] == 2.0
        assert event.detail["streams"] == events["cam-a"].detail["streams"]  # type: ignore[union-attr]
        decisions[name] = next(s for s in event.detail["streams"] if s["stream_id"] == name)
    assert sorted(decisions) == list(names)
    assert events["cam-c"].detail["inference_only"]  # type: ignore[union-attr]
    assert decisions["cam-c"]["retraining_config"] is None
    assert all(d["inference_gpus"] > 0 for d in decisions.values())
    total = sum(d["inference_gpus"] + d["retraining_gpus"] for d in decisions.values())
    assert total <= 2.0 + 1e-9
    for name in ("cam-a", "cam-b"):
        v2 = plane.deployments.version(ids[name], 2)
        assert v2.job_id == job.id and v2.parent == 1
        kinds = [e.kind for e in plane.deployments.events(ids[name]) if e.version == 2]
        if decisions[name]["retraining_config"] is None or v2.metrics.get("ekya_retrained") == 0:
            # Thief gave it no retraining, or the window's own hot-load gate kept the deployed
            # model (the retrained one scored no better on the same held-out split): no model
            assert v2.status is VersionStatus.CANCELLED
            continue
        assert "gate_accuracy" in v2.metrics and EventKind.VERSION_REGISTERED in kinds
        if EventKind.GATE_PASSED in kinds:  # a canary, or at once: a drop's update
            assert EventKind.CANARY_STARTED in kinds or (
                v2.metrics.get("recovery_update") and EventKind.PROMOTED in kinds)
        else:
            assert v2.status is VersionStatus.REJECTED
    # Thief retrained at least one of the two (a 600 s window on two GPUs)
    assert any(decisions[n]["retraining_config"] for n in ("cam-a", "cam-b"))
