"""The control loop on a real store and real digits windows, with time injected.

Jobs are finished by the test (unit test): it trains the staged data with plain local SGD
from the staged parent weights and moves the job to COMPLETED through the real transition
table, so everything the control plane reads is what a learner would have written.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _traffic import LiveTrafficPlane

from deepedge.controlplane.artifacts import artifact_path, load_version, served_path, write_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.loop import ControlPlane
from deepedge.controlplane.records import (
    DeploymentRecord,
    EventKind,
    ModelVersion,
    TriggerKind,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.learning.model_state import load_model_file, save_model_file
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.training import train_epochs
from deepedge.service.config import ServiceSettings
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore

SPEC: dict[str, Any] = {
    "name": "cam-1",
    "labeller": "ground-truth",
    "window_s": 1.0,
    "stream": {"window_size": 120, "onset_window": 3, "ramp_windows": 1},
    "update": {"label_fraction": 1.0, "epochs": 6},
    "trigger": {"sample_count": None, "accuracy_threshold": 0.8, "cooldown_windows": 0},
    "canary": {"fraction": 0.5, "windows": 1},
    "gate": {"rollback_tolerance": 0.02},
}


def finish_job(plane: ControlPlane, tenant_id: str, job_id: str, epochs: int = 6) -> None:
    """Train what the control plane staged, as the model-update learner would."""
    job_dir = plane.workspace.job_dir(tenant_id, job_id)
    staged = np.load(job_dir.work / "train.npz")
    model = load_model_file(make_edge_model(10, 16, 8, 0), job_dir.work / "parent.pt")
    train_epochs(model, staged["x_train"], staged["y_train"], epochs)
    save_model_file(model, job_dir.results / "model.pt")
    (job_dir.results / "result.json").write_text(json.dumps({"final_accuracy": 0.5}))
    for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING,
                   JobStatus.STORING, JobStatus.COMPLETED):  # fmt: skip
        plane.store.transition(job_id, status, "finished by the test")


@pytest.fixture
def plane(tmp_path: Path, sqlite_store: JobStore) -> ControlPlane:
    settings = ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0)
    return LiveTrafficPlane(sqlite_store, settings, first_versions_inline=True)


def run_windows(plane: ControlPlane, tenant_id: str, start: int, stop: int) -> None:
    for now in range(start, stop):
        plane.tick(float(now))
        for deployment in plane.deployments.live():
            job_id = deployment.current_job_id
            if job_id and plane.store.get(job_id).status is JobStatus.QUEUED:
                finish_job(plane, tenant_id, job_id)


def test_drop_triggers_update_gate_canary_promotion_and_survives_restart(
    plane: ControlPlane, tmp_path: Path
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    deployment, created = plane.deployments.create(
        tenant.id, DeploymentSpec.model_validate(SPEC), now=0.0
    )
    assert created and deployment.status is DeploymentStatus.UPDATING
    run_windows(plane, tenant.id, 0, 5)
    windows = plane.deployments.windows(deployment.id)
    drops = [w for w in windows if w.trigger is TriggerKind.ACCURACY_DROP]
    assert drops, [(w.window, w.accuracy) for w in windows]
    assert all(w.accuracy is not None and w.accuracy < 0.95 for w in drops)
    kinds = [e.kind for e in plane.deployments.events(deployment.id)]
    first_trigger = kinds.index(EventKind.TRIGGER)
    assert kinds[first_trigger + 1] is EventKind.JOB_SUBMITTED  # same tick as the window
    # A restarted service (a new control plane over the same store) carries on.
    again = LiveTrafficPlane(plane.store, plane.settings, first_versions_inline=True)
    run_windows(again, tenant.id, 5, 9)
    versions = {v.number: v for v in again.deployments.versions(deployment.id)}
    assert versions[2].parent == 1 and versions[2].job_id is not None
    # it trains on the windows since the drift began: those served below the bar, up to
    # the trigger's (the window before the drift is not among them)
    accuracy = {w.window: w.accuracy for w in again.deployments.windows(deployment.id)}
    trigger = next(e for e in again.deployments.events(deployment.id)
                   if e.kind is EventKind.TRIGGER and e.version == 2)  # fmt: skip
    bar = trigger.detail["bar"]  # the threshold, or the level before the drift less a margin
    assert bar >= 0.8
    assert versions[2].data_windows[-1] == drops[0].window
    assert all((accuracy[w] or 0.0) < bar for w in versions[2].data_windows)
    assert (accuracy[versions[2].data_windows[0] - 1] or 0.0) >= bar
    assert "gate_accuracy" in versions[2].metrics
    kinds = [e.kind for e in again.deployments.events(deployment.id)]
    assert EventKind.CANARY_STARTED in kinds and EventKind.PROMOTED in kinds
    served = [w.served_version for w in again.deployments.windows(deployment.id)]
    assert served == sorted(served) and served[-1] >= 2  # a newer version took over
    assert [w.window for w in again.deployments.windows(deployment.id)] == list(range(9))


def test_a_drift_overtakes_a_routine_update_whose_job_is_told_to_halt(plane: ControlPlane) -> None:
    """A sample-count update of the first scene is still training (its job never ends
    here) when the drift comes in window 3: it is cancelled, its job asked to halt, and the
    drift's update from what serves is submitted in the same tick."""
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate(
        {**SPEC, "trigger": {"sample_count": 150, "accuracy_threshold": 0.8,
                             "cooldown_windows": 0}})  # fmt: skip
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    for now in range(8):  # no job is finished: the routine update trains on
        plane.tick(float(now))
        statuses = {v.number: v.status for v in plane.deployments.versions(deployment.id)}
        if statuses.get(2) is VersionStatus.CANCELLED:
            break
    routine = plane.deployments.version(deployment.id, 2)
    assert routine.status is VersionStatus.CANCELLED and routine.job_id is not None
    assert plane.store.get(routine.job_id).requested_action == "HALT"
    drift = plane.deployments.version(deployment.id, 3)
    assert drift.status is VersionStatus.TRAINING and drift.parent == 1
    assert drift.job_id is not None and drift.job_id != routine.job_id
    events = plane.deployments.events(deployment.id)
    cancelled = next(e for e in events if e.kind is EventKind.CANCELLED)
    assert cancelled.version == 2 and cancelled.job_id == routine.job_id
    triggers = {e.version: e.detail["trigger"] for e in events if e.kind is EventKind.TRIGGER}
    assert triggers == {2: "sample-count", 3: "accuracy-drop"}
    current = plane.deployments.get_by_id(deployment.id)
    assert current.status is DeploymentStatus.UPDATING and current.current_job_id == drift.job_id


EDGE_SERVER = {
    "target": {"kind": "edge-server"},
    "update": {"policy": "ekya-window", "label_fraction": 1.0},
}


@pytest.mark.parametrize("while_updating", [False, True])
@pytest.mark.parametrize("policy", ["model-update", "ekya-window"])
def test_a_bad_version_is_rolled_back_after_its_first_window(
    plane: ControlPlane, while_updating: bool, policy: str
) -> None:
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    edge = EDGE_SERVER if policy == "ekya-window" else {}
    spec = DeploymentSpec.model_validate({**SPEC, **edge, "stream": {"onset_window": 50}})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    run_windows(plane, tenant.id, 0, 2)
    # Plant an untrained model as v2 serving over v1 (an operator's forced hot update).
    from deepedge.controlplane.deployments import NewVersion, Step, VersionChange

    current = plane.deployments.get_by_id(deployment.id)
    write_version(artifact_path(plane.settings.data_dir, current, 2),
                  make_edge_model(10, 16, 8, seed=123))  # fmt: skip
    plane.deployments.commit(
        current,
        Step(
            deployment={"serving_version": 2, "previous_version": 1},
            new_versions=(NewVersion(2, 1, (), "planted", status=VersionStatus.CANDIDATE),),
            versions=(VersionChange(1, VersionStatus.RETIRED),
                      VersionChange(2, VersionStatus.SERVING, replaced=1)),
        ),
    )  # fmt: skip
    if while_updating:  # an update of v2 is queued when v2 turns out bad
        current = plane.deployments.get_by_id(deployment.id)
        plane.deployments.commit(current, Step(
            deployment={"status": DeploymentStatus.UPDATING},
            new_versions=(NewVersion(3, 2, (0, 1), "update in flight"),),
        ))  # fmt: skip
        for now in (2, 3):  # nobody runs its job here
            plane.tick(float(now))
    else:
        run_windows(plane, tenant.id, 2, 4)
    versions = {v.number: v for v in plane.deployments.versions(deployment.id)}
    assert versions[2].status is VersionStatus.ROLLED_BACK
    assert versions[2].windows_served == 1
    assert versions[1].status is VersionStatus.SERVING
    windows = plane.deployments.windows(deployment.id)
    assert [w.served_version for w in windows] == [1, 1, 2, 1]
    assert windows[2].previous_accuracy is not None and windows[2].accuracy is not None
    assert windows[2].accuracy < windows[2].previous_accuracy
    if while_updating:  # the update goes on; no second one is started beside it
        assert versions[3].status is VersionStatus.TRAINING and versions[3].job_id
        assert plane.store.get(versions[3].job_id).kind == policy
        assert 4 not in versions
        assert plane.deployments.get_by_id(deployment.id).status is DeploymentStatus.UPDATING


def test_placement_is_solved_once_by_a_placement_job(plane: ControlPlane) -> None:
    from deepedge.service import learner

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    problem = json.loads((Path(__file__).resolve().parents[2] / "examples/placement-tiny.json")
                         .read_text())  # fmt: skip
    spec = DeploymentSpec.model_validate({**SPEC, "placement": problem})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    plane.tick(0.0)
    submitted = plane.deployments.last_event(deployment.id, EventKind.PLACEMENT)
    assert submitted is not None and submitted.detail["state"] == "submitted"
    plane.tick(0.5)  # nothing new while the job is queued: one job only
    job_id = submitted.job_id
    assert job_id is not None
    assert [j.id for j in plane.store.list_jobs(tenant.id)] == [job_id]
    job_dir = plane.workspace.job_dir(tenant.id, job_id)
    job_dir.work.mkdir(parents=True)
    (job_dir.work / "doc.json").write_text(json.dumps(problem))
    assert learner.main(["--kind", "placement", "--document", str(job_dir.work / "doc.json"),
                         "--results", str(job_dir.results)]) == 0  # fmt: skip
    for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING,
                   JobStatus.STORING, JobStatus.COMPLETED):  # fmt: skip
        plane.store.transition(job_id, status, "finished by the test")
    plane.tick(1.0)
    decided = plane.deployments.last_event(deployment.id, EventKind.PLACEMENT)
    assert decided is not None and decided.detail["state"] == "decided"
    assert decided.detail["placements"] and "@edge-" in decided.message
    plane.tick(2.0)
    placement_events = [e for e in plane.deployments.events(deployment.id)
                        if e.kind is EventKind.PLACEMENT]  # fmt: skip
    assert len(placement_events) == 2


def test_a_bad_placement_problem_names_its_field() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="placement"):
        DeploymentSpec.model_validate({**SPEC, "placement": {"sources": []}})


def test_a_golden_labeller_in_training_holds_up_no_other_deployment(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from deepedge.controlplane import golden_labeller

    monkeypatch.setattr(golden_labeller, "GOLDEN_POOL", 200)  # a small ensemble: a unit test
    monkeypatch.setattr(golden_labeller, "GOLDEN_EPOCHS", 1)
    monkeypatch.setattr(golden_labeller, "GOLDEN_MEMBERS", 1)
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    golden_spec = DeploymentSpec.model_validate({**SPEC, "name": "golden",
                                                 "labeller": "golden-model"})  # fmt: skip
    golden, _ = plane.deployments.create(tenant.id, golden_spec, now=0.0)
    plain, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(SPEC), now=0.0)
    plane.tick(0.0)
    assert plane.deployments.get_by_id(plain.id).window == 0
    assert plane.deployments.get_by_id(golden.id).window == -1  # its labeller is not there yet
    deadline = time.monotonic() + 300
    while not plane.site().labeller_ready(golden_spec) and time.monotonic() < deadline:
        time.sleep(0.2)
    plane.tick(1.0)
    plane.tick(1.5)
    point = plane.deployments.windows(golden.id)[0]
    assert point.window == 0 and point.accuracy is not None


@pytest.mark.parametrize("during", ["training", "canary"])
def test_stopping_mid_update_cancels_the_live_version_and_halts_its_job(
    plane: ControlPlane, during: str
) -> None:
    from deepedge.controlplane import rollout_actions

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate({**SPEC, "canary": {"fraction": 0.5, "windows": 3,
                                                              "during_recovery": True}})
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    for now in range(12):  # until v2 trains (its job left QUEUED) or serves as the canary
        if during == "canary":
            run_windows(plane, tenant.id, now, now + 1)
        else:
            plane.tick(float(now))
        current = plane.deployments.get_by_id(deployment.id)
        if during == "training" and current.current_job_id is not None:
            break
        if during == "canary" and current.status is DeploymentStatus.CANARY:
            break
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.status is (VersionStatus.TRAINING if during == "training" else VersionStatus.CANARY)
    assert v2.job_id is not None
    stopped = rollout_actions.stop(plane.deployments, tenant.id, "cam-1")
    assert stopped.status is DeploymentStatus.STOPPED
    assert stopped.canary_version is None and stopped.current_job_id is None
    versions = {v.number: v.status for v in plane.deployments.versions(deployment.id)}
    assert versions == {1: VersionStatus.SERVING, 2: VersionStatus.CANCELLED}
    last = plane.deployments.events(deployment.id)[-1]
    assert last.kind is EventKind.STOPPED and last.detail["cancelled"] == [2]
    job = plane.store.get(v2.job_id)
    if during == "training":  # the job that trained it is told to halt
        assert job.status is JobStatus.QUEUED and job.requested_action == "HALT"
    else:  # its job had completed: nothing to halt
        assert job.status is JobStatus.COMPLETED and job.requested_action is None
    plane.tick(20.0)  # a stopped deployment is left alone: nothing changes any more
    assert {v.number: v.status for v in plane.deployments.versions(deployment.id)} == versions


def test_first_versions_train_in_the_background_without_holding_up_windows(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """The service's mode: a tick never trains a first version itself. While three are
    trained in the background, the deployment already serving keeps getting its windows;
    once their weights are there, one tick registers all three and scores their window 0."""
    from _support import wait_until

    plane = LiveTrafficPlane(
        sqlite_store, ServiceSettings(data_dir=tmp_path / "data", traffic_settle_s=0.0)
    )
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    serving, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(SPEC), 0.0)
    assert wait_until(lambda: (plane.tick(0.0), plane.deployments.get_by_id(serving.id))[1]
                      .serving_version == 1, timeout_s=300)  # fmt: skip
    news = [plane.deployments.create(tenant.id, DeploymentSpec.model_validate(
        {**SPEC, "name": f"cam-{k}", "base_epochs": 20}), 0.0)[0] for k in (2, 3, 4)]  # fmt: skip
    try:
        window = plane.deployments.get_by_id(serving.id).window
        for now in (1.0, 2.0):
            plane.tick(now)
        assert plane.deployments.get_by_id(serving.id).window == window + 2
        paths = [served_path(plane.artifact(d, 1)) for d in news]  # servable once exported
        assert wait_until(lambda: all(p.exists() for p in paths), timeout_s=300)
        plane.tick(3.0)
        for d in news:
            current = plane.deployments.get_by_id(d.id)
            assert current.serving_version == 1 and current.window == 0
    finally:
        plane.stop()


def test_first_versions_train_in_a_thread_of_lower_priority(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """The background thread's niceness is the loop's + FIRST_VERSION_NICE (Linux: per
    thread), the loop's own thread keeps its priority."""
    import os
    import threading

    from deepedge.controlplane.first_versions import FIRST_VERSION_NICE, lower_thread_priority

    if not hasattr(os, "getpriority"):
        pytest.skip("no per-thread priorities here")
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen: list[int] = []

    def probe() -> None:
        lower_thread_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    assert seen == [min(19, mine + FIRST_VERSION_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_an_update_with_too_little_traffic_waits_for_samples_and_says_so(
    plane: ControlPlane,
) -> None:
    """Live traffic decides how much an update can train on: windows of 20 labelled
    requests are too little, so the requested update waits (said once, not a failed version
    a window), and starts once its windows hold enough samples for training and the gate."""
    from deepedge.controlplane.rollout_actions import request_update

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = DeploymentSpec.model_validate(
        {**SPEC, "stream": {"window_size": 20, "onset_window": 50}, "update": {"recent_windows": 1},
         # (only the operator's request triggers)
         "trigger": {"sample_count": None, "accuracy_threshold": 0.0}}
    )  # fmt: skip
    deployment, _ = plane.deployments.create(tenant.id, spec, now=0.0)
    run_windows(plane, tenant.id, 0, 2)
    request_update(plane.deployments, tenant.id, "cam-1")
    run_windows(plane, tenant.id, 2, 3)  # windows 0-2: 60 labelled
    assert [v.number for v in plane.deployments.versions(deployment.id)] == [1]
    said = [e for e in plane.deployments.events(deployment.id) if e.kind is EventKind.UNDECIDED]
    assert len(said) == 1 and "waits for samples: 60 labelled" in said[0].message, said
    need = 80  # max(50 training + 20 held out, 20 held out / 0.25 validation)
    assert f"{need} needed" in said[0].message
    run_windows(plane, tenant.id, 3, 5)  # window 3: 4 x 20 labelled, enough
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.status is not VersionStatus.FAILED and v2.data_windows == (0, 1, 2, 3)
    assert plane.deployments.last_event(deployment.id, EventKind.JOB_FAILED) is None


def test_an_update_that_cannot_start_says_why_at_once(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data of a window that breaks after the deployment was created: the version fails
    in the same tick, with the cause as an event (said once), and the deployment goes on."""
    from deepedge.core.errors import InvalidInputError

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = {
        **SPEC,
        "trigger": {"sample_count": None, "accuracy_threshold": 1.0, "cooldown_windows": 5},
    }
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec), 0.0)
    cause = "data: window w1: 40 of 40 samples are bad (more than data.max_bad_fraction 0.05)"

    def broken(*args: object) -> None:
        raise InvalidInputError(cause, field="data")

    monkeypatch.setattr(plane.updates, "training_data", broken)
    run_windows(plane, tenant.id, 0, 4)
    v2 = plane.deployments.version(deployment.id, 2)
    assert v2.status is VersionStatus.FAILED and v2.job_id is None
    events = plane.deployments.events(deployment.id)
    failed = [e for e in events if e.kind is EventKind.JOB_FAILED]
    assert failed and cause in failed[0].message
    assert [e.message for e in events if e.kind is EventKind.ERROR] == [cause]
    now = plane.deployments.get_by_id(deployment.id)
    assert now.status is DeploymentStatus.ACTIVE and now.window >= 2


@pytest.mark.parametrize("flat", [True, False])
def test_an_upload_is_loaded_into_the_model_by_the_loop(plane: ControlPlane, flat: bool) -> None:
    import io

    import torch

    from deepedge.controlplane import rollout_actions

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = {**SPEC, "trigger": {"sample_count": None, "accuracy_threshold": 0.0}}
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec), 0.0)
    run_windows(plane, tenant.id, 0, 2)
    good = make_edge_model(10, 16, 8, seed=9)
    if flat:
        buffer = io.BytesIO()
        np.save(buffer, get_flat_weights(good))
    else:
        buffer = io.BytesIO()
        torch.save(good.state_dict(), buffer)
    data_dir = plane.settings.data_dir
    _, number = rollout_actions.register_upload(
        plane.deployments, data_dir, tenant.id, deployment.name, buffer.getvalue(), flat,
        "trained elsewhere", skip_gate=True, skip_canary=True,
    )  # fmt: skip
    plane.tick(2.0)
    current = plane.deployments.get_by_id(deployment.id)
    promoted = [e.version for e in plane.deployments.events(deployment.id)
                if e.kind is EventKind.PROMOTED]  # fmt: skip
    assert promoted[-1] == number  # (an untrained model: rolled back after its window)
    stored = load_version(current.spec, artifact_path(data_dir, current, number))
    assert np.array_equal(get_flat_weights(stored), get_flat_weights(good))
    assert not any(artifact_path(data_dir, current, number).parent.glob("*.upload.*"))


def _eight_windows_served(plane: ControlPlane) -> tuple[DeploymentRecord, ModelVersion]:
    """A deployment that served eight labelled windows with no update (no trigger), and its
    first version."""
    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    spec = {**SPEC, "trigger": {"sample_count": None, "accuracy_threshold": 0.0}}
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(spec), 0.0)
    run_windows(plane, tenant.id, 0, 8)
    deployment = plane.deployments.get_by_id(deployment.id)
    return deployment, plane.deployments.version(deployment.id, 1)


def test_the_gate_scores_both_versions_on_samples_neither_trained_on(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate's windows overlap the serving version's: the held-out samples the
    serving version trained on are left out of the gate (it would read high on them)."""
    import dataclasses

    from deepedge.controlplane.updates import unseen

    deployment, first = _eight_windows_served(plane)
    rival = dataclasses.replace(first, number=2, data_windows=(1, 2, 3, 4))
    candidate = dataclasses.replace(first, number=3, data_windows=(1, 2, 3, 4, 5, 6))
    monkeypatch.setattr(plane.updates.deployments, "version", lambda _d, n: rival)
    updates = plane.updates
    theirs, mine = updates._split(deployment, rival), updates._split(deployment, candidate)
    trained = set(theirs.ids[theirs.train].tolist())
    overlap = [i for i in mine.val if mine.ids[i] in trained]
    assert overlap and len(mine.val) > 20  # a random split shares many
    kept = unseen(mine.ids, mine.val, theirs.ids[theirs.train])
    assert len(kept) == len(mine.val) - len(overlap)
    assert not any(mine.ids[i] in trained for i in kept)
    _, y = updates.held_out_unseen(deployment, candidate, 2)
    assert len(y) == len(kept) and np.array_equal(y, mine.y[kept])
    # what serves trained on none of them (no windows described): all held out
    bare = dataclasses.replace(rival, data_windows=())
    monkeypatch.setattr(plane.updates.deployments, "version", lambda _d, n: bare)
    assert len(updates.held_out_unseen(deployment, candidate, 2)[1]) == len(mine.val)


def test_a_candidate_whose_parent_no_longer_serves_is_gated_on_what_came_since(
    plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept version served again while an update trained (its condition came back): the
    update learned windows that no longer come, so its gate reads the uniformly labelled
    samples served after its newest training window, not its held-out split."""
    import dataclasses

    from deepedge.controlplane import updates as updates_module
    from deepedge.dataplane.sample_store import CHOSEN_SOURCES

    deployment, first = _eight_windows_served(plane)
    candidate = dataclasses.replace(first, number=3, parent=2, data_windows=(1, 2, 3, 4))
    due = {w.window: w.due_at for w in plane.deployments.windows(deployment.id)}
    after = [s for s in plane.site().samples.window(deployment.id, due[4], math.inf)
             if s.label is not None and s.label_source not in CHOSEN_SOURCES]  # fmt: skip
    _, y = plane.updates.labelled_since(deployment, candidate)
    assert len(after) >= 20 and np.array_equal(y, [s.label for s in after])
    # at most the newest GATE_SINCE_SAMPLES: a long wait must not stall the loop's step
    monkeypatch.setattr(updates_module, "GATE_SINCE_SAMPLES", 7)
    _, y = plane.updates.labelled_since(deployment, candidate)
    assert np.array_equal(y, [s.label for s in after[-7:]])
    monkeypatch.undo()
    # nothing served since its data: nothing to gate on (the gate says so and rejects)
    late = dataclasses.replace(candidate, data_windows=(max(due),))
    x, y = plane.updates.labelled_since(deployment, late)
    assert len(y) == len(x) == 0


def test_a_step_the_transition_tables_refuse_is_said_not_skipped_quietly(
    plane: ControlPlane,
) -> None:
    """A decision the tables refuse is a fault of the loop, not a race: it is the
    deployment's error event (said once), where a change under the loop is retried."""
    from deepedge.core.errors import IllegalTransitionError

    tenant = plane.store.create_tenant("t", "tok", max_cores=64)
    deployment, _ = plane.deployments.create(tenant.id, DeploymentSpec.model_validate(SPEC), 0.0)
    cause = "a ROLLED_BACK model version cannot become ROLLED_BACK; allowed: none (terminal)"

    def refused() -> None:
        raise IllegalTransitionError(cause)

    for _ in range(2):
        plane._guarded(deployment, refused)
    errors = [e.message for e in plane.deployments.events(deployment.id)
              if e.kind is EventKind.ERROR]  # fmt: skip
    assert errors == [cause]
