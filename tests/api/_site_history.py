"""A site's history written into the store before the service starts, for the dashboard's
browser tests: deployments whose windows, versions and decisions are what the control plane
commits (through its own :class:`DeploymentStore`), and nothing left for its loop to do (the
next window is due in a day). Drifts, updates, canaries and rollbacks that would take a
real loop many minutes and a Ray cluster are then on the page at once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
from deepedge.controlplane.records import Event, EventKind, TriggerKind, WindowPoint
from deepedge.controlplane.rollout_status import DeploymentStatus as D
from deepedge.controlplane.rollout_status import VersionStatus as V
from deepedge.service.store import JobStore

DAY_S = 86_400.0
THRESHOLD = 0.8
# gate-cam's live traffic, every second from a minute ago to TRAFFIC_AHEAD_S from now: one
# replica answers TRAFFIC_RPS requests (none to a canary: it has none), one fails every
# fifth second, latencies of three values (a 25.5 ms mean).
TRAFFIC_RPS = 20
TRAFFIC_AHEAD_S = 6 * 3600
TRAFFIC_LATENCY_MS = [15.0] * 14 + [30.0] * 5 + [150.0]
# The same requests as the data plane's ingress timed them (arrival to answer sent: longer,
# a 51 ms mean), every one of those seconds covered.
INGRESS_LATENCY_MS = [30.0] * 14 + [60.0] * 5 + [300.0]


@dataclass(frozen=True)
class Canary:
    """A candidate ``version`` served as a canary in windows ``start..end``; promoted or
    rolled back at ``end``."""

    version: int
    start: int
    end: int
    accuracy: float
    promoted: bool


# gate-cam drifts twice: v2's one-window canary is promoted, v3's three windows are rolled
# back, v4's one window is promoted; it ends below its trigger threshold.
GATE_CANARIES = (
    Canary(2, 16, 16, 0.91, True),
    Canary(3, 28, 30, 0.70, False),
    Canary(4, 34, 34, 0.88, True),
)
GATE_WINDOWS = 40


def gate_accuracy(window: int) -> float:
    """The served accuracy of gate-cam in ``window`` (drift, recovery, drift)."""
    if window < 10:
        return 0.93
    if window < 16:
        return 0.93 - 0.04 * (window - 9)
    if window < 25:
        return 0.90
    if window < 34:
        return 0.78
    return 0.90 if window < 37 else 0.74


def spec(name: str, **overrides: Any) -> DeploymentSpec:
    document: dict[str, Any] = {
        "name": name,
        "labeller": "ground-truth",
        "window_s": 3600,
        "trigger": {"sample_count": None, "accuracy_threshold": THRESHOLD},
        "canary": {"windows": 1},
        **overrides,
    }
    return DeploymentSpec.model_validate(document)


def _first_version(registry: DeploymentStore, name: str, tenant_id: str) -> None:
    record = registry.get(tenant_id, name)
    registry.commit(
        record,
        Step(
            deployment={"status": D.ACTIVE, "serving_version": 1,
                        "next_window_at": time.time() + DAY_S},
            versions=(VersionChange(1, V.CANDIDATE), VersionChange(1, V.SERVING)),
            events=(Event(EventKind.PROMOTED, "v1 serves (first version)", version=1),),
        ),
    )  # fmt: skip


def _window(registry: DeploymentStore, name: str, tenant_id: str, point: WindowPoint,
            events: tuple[Event, ...] = (), **deployment: Any) -> None:  # fmt: skip
    record = registry.get(tenant_id, name)
    columns = {"window": point.window, "last_accuracy": point.accuracy, **deployment}
    registry.commit(record, Step(deployment=columns, window=point, events=events))


Scored = tuple[int, float] | None  # (version, accuracy)


def _point(window: int, served: int, accuracy: float | None, canary: Scored = None,
           trigger: TriggerKind = TriggerKind.NONE, previous: Scored = None,
           samples: int = 100) -> WindowPoint:  # fmt: skip
    now = time.time()  # scored as it is committed: after the decisions that came before
    return WindowPoint(
        window=window, at=now, due_at=now, served_version=served, accuracy=accuracy,
        canary_version=None if canary is None else canary[0],
        canary_accuracy=None if canary is None else canary[1],
        previous_version=None if previous is None else previous[0],
        previous_accuracy=None if previous is None else previous[1], samples=samples,
        trigger=trigger, severity=min(1.0, window / GATE_WINDOWS),
    )  # fmt: skip


def gate_cam(registry: DeploymentStore, tenant_id: str) -> None:
    """40 windows, three canaries (module constants), below threshold at the end."""
    name = "gate-cam"
    registry.create(tenant_id, spec(name))
    _first_version(registry, name, tenant_id)
    serving = 1
    for w in range(GATE_WINDOWS):
        canary = next((c for c in GATE_CANARIES if c.start <= w <= c.end), None)
        events: list[Event] = []
        columns: dict[str, Any] = {}
        record = registry.get(tenant_id, name)
        versions: list[VersionChange] = []
        new: list[NewVersion] = []
        if canary is not None and w == canary.start:
            new.append(NewVersion(canary.version, serving, (w - 2, w - 1), "an update"))
            versions += [VersionChange(canary.version, V.CANDIDATE),
                         VersionChange(canary.version, V.CANARY)]  # fmt: skip
            events.append(Event(EventKind.CANARY_STARTED, f"v{canary.version} serves a canary",
                                window=w, version=canary.version))  # fmt: skip
            columns |= {"status": D.CANARY, "canary_version": canary.version}
        if canary is not None and w == canary.end:
            if canary.promoted:
                versions += [VersionChange(serving, V.RETIRED),
                             VersionChange(canary.version, V.SERVING)]  # fmt: skip
                events.append(Event(EventKind.PROMOTED, f"v{canary.version} promoted",
                                    window=w, version=canary.version))  # fmt: skip
                columns |= {"serving_version": canary.version}
            else:
                versions.append(VersionChange(canary.version, V.ROLLED_BACK))
                events.append(Event(EventKind.ROLLED_BACK, f"canary v{canary.version} rolled "
                                    "back: worse than the serving version", window=w,
                                    version=canary.version))  # fmt: skip
            columns |= {"status": D.ACTIVE, "canary_version": None}
        point = _point(w, serving, gate_accuracy(w),
                       None if canary is None else (canary.version, canary.accuracy))  # fmt: skip
        if columns.get("status") is record.status:
            del columns["status"]  # no transition: the status stays
        registry.commit(
            record,
            Step(
                deployment={"window": w, "last_accuracy": point.accuracy, **columns},
                versions=tuple(versions),
                new_versions=tuple(new),
                window=point,
                events=tuple(events),
            ),
        )
        if canary is not None and w == canary.end and canary.promoted:
            serving = canary.version


def yard_cam(registry: DeploymentStore, tenant_id: str) -> None:
    """A healthy deployment: six windows well above its threshold."""
    registry.create(tenant_id, spec("yard-cam"))
    _first_version(registry, "yard-cam", tenant_id)
    for w in range(6):
        _window(registry, "yard-cam", tenant_id, _point(w, 1, 0.95))


def edge_cam(registry: DeploymentStore, tenant_id: str, server: str = "edge-1") -> None:
    """A deployment on the edge server whose newest Ekya window shared the server with a
    long-named stream: the longest allocation text the nodes table shows."""
    from deepedge.controlplane.update_jobs import ekya_allocation

    name = "edge-cam"
    registry.create(tenant_id, spec(name, target={"kind": "edge-server", "gpus": 2,
                                                  "nodes": [server]},
                                    update={"policy": "ekya-window"}))  # fmt: skip
    _first_version(registry, name, tenant_id)
    streams = [
        {"stream_id": name, "inference_config": "r500", "inference_gpus": 0.4,
         "retraining_config": "e4-f100-z0", "retraining_gpus": 1.2, "window_accuracy": 0.8},
        {"stream_id": "loading-dock-camera-north-entrance", "inference_config": "r250",
         "inference_gpus": 0.4, "retraining_config": None, "retraining_gpus": 0.0,
         "window_accuracy": 0.7},
    ]  # fmt: skip
    result = {"scheduler": "thief", "device": "cpu", "retrained": "e4-f100-z0", "configs": [],
              "plans": [{"gpus": 2.0, "window_s": 30.0, "streams": streams}]}  # fmt: skip
    event = ekya_allocation(name, server, 2, 0, "e" * 32, result)
    assert event is not None
    _window(registry, name, tenant_id, _point(0, 1, 0.86), (event,))


# drift-cam (another tenant's): v1 drifts from its level; the trigger in window DRIFT_TRIGGER
# trains v2, promoted in window DRIFT_PROMOTED; v3 serves from window DRIFT_V3 on, a change
# no event read says (its event older than those read, as on a long-lived deployment); each
# served version is scored beside the one it replaced; its last window has no labelled sample.
DRIFT_LEVEL = 0.93
DRIFT_TRIGGER, DRIFT_PROMOTED, DRIFT_V3, DRIFT_WINDOWS = 11, 13, 22, 30
DRIFT_LAST_SCORED = 0.91  # windows DRIFT_V3 .. DRIFT_WINDOWS - 2


def _drift_window(w: int) -> WindowPoint:
    if w == DRIFT_WINDOWS - 1:
        return _point(w, 3, None, previous=None, samples=0)
    if w < DRIFT_PROMOTED + 1:
        accuracy = DRIFT_LEVEL - 0.05 * max(0, w - 7)
        trigger = TriggerKind.ACCURACY_DROP if w == DRIFT_TRIGGER else TriggerKind.NONE
        return _point(w, 1, round(accuracy, 2), trigger=trigger)
    if w < DRIFT_V3:
        return _point(w, 2, 0.90, previous=(1, 0.72))
    return _point(w, 3, DRIFT_LAST_SCORED, previous=(2, 0.88))


def drift_cam(registry: DeploymentStore, tenant_id: str) -> None:
    name = "drift-cam"
    registry.create(tenant_id, spec(name))
    _first_version(registry, name, tenant_id)
    for w in range(DRIFT_WINDOWS):
        record = registry.get(tenant_id, name)
        point = _drift_window(w)
        step: dict[str, Any] = {}
        if w == DRIFT_TRIGGER:
            trigger = Event(EventKind.TRIGGER, f"window {w}: accuracy-drop", window=w, version=2,
                            detail={"trigger": "accuracy-drop", "level": DRIFT_LEVEL})  # fmt: skip
            step = {"deployment": {"status": D.UPDATING},
                    "new_versions": (NewVersion(2, 1, (8, 9, 10, 11), "update on accuracy-drop"),),
                    "events": (trigger,)}  # fmt: skip
        elif w == DRIFT_PROMOTED:
            step = {"deployment": {"status": D.ACTIVE, "serving_version": 2},
                    "versions": (VersionChange(2, V.CANDIDATE), VersionChange(1, V.RETIRED),
                                 VersionChange(2, V.SERVING)),
                    "events": (Event(EventKind.PROMOTED, "v2 promoted", window=w,
                                     version=2),)}  # fmt: skip
        elif w == DRIFT_V3 - 1:
            step = {"deployment": {"serving_version": 3},
                    "new_versions": (NewVersion(3, 2, (), "registered by the operator"),),
                    "versions": (VersionChange(3, V.CANDIDATE), VersionChange(2, V.RETIRED),
                                 VersionChange(3, V.SERVING))}  # fmt: skip
        columns = {"window": w, "last_accuracy": point.accuracy, **step.pop("deployment", {})}
        registry.commit(record, Step(deployment=columns, window=point, **step))


def old_cam(registry: DeploymentStore, tenant_id: str) -> None:
    """A stopped deployment, created before drift-cam."""
    registry.create(tenant_id, spec("old-cam"))
    _first_version(registry, "old-cam", tenant_id)
    _window(registry, "old-cam", tenant_id, _point(0, 1, 0.5))
    registry.commit(registry.get(tenant_id, "old-cam"), Step(deployment={"status": D.STOPPED}))


def seed_drift(url: str, tenant_id: str) -> None:
    """old-cam (stopped), then drift-cam, for one tenant, in the store at ``url``."""
    store = JobStore(url)
    try:
        registry = DeploymentStore(store)
        old_cam(registry, tenant_id)
        drift_cam(registry, tenant_id)
    finally:
        store.dispose()


def seed(url: str, tenant_id: str) -> None:
    """Every deployment above, for one tenant, in the store at ``url``."""
    store = JobStore(url)
    try:
        registry = DeploymentStore(store)
        gate_cam(registry, tenant_id)
        yard_cam(registry, tenant_id)
        edge_cam(registry, tenant_id)
    finally:
        store.dispose()


def seed_traffic(url: str, data_dir: Path, tenant_id: str, name: str = "gate-cam") -> None:
    """Deployment ``name``'s live traffic in the site's sample store, as the data plane's
    replicas report it (the module's TRAFFIC_ constants)."""
    from deepedge.dataplane.ingress_traffic import IngressRow
    from deepedge.dataplane.sample_store import (
        SampleStore,
        TrafficRow,
        histogram,
        sample_store_path,
    )
    from deepedge.dataplane.serving_table import model_name

    store = JobStore(url)
    try:
        deployment = DeploymentStore(store).get(tenant_id, name).id
        model = model_name(store.tenant(tenant_id).name, name)
    finally:
        store.dispose()
    hist, at_ingress = histogram(TRAFFIC_LATENCY_MS), histogram(INGRESS_LATENCY_MS)
    now = int(time.time())
    rows = [
        TrafficRow(
            deployment,
            second,
            "replica-1",
            requests=TRAFFIC_RPS,
            canary=0,
            pinned=0,
            failed=int(second % 5 == 0),
            images=TRAFFIC_RPS,
            latency_ms_sum=sum(TRAFFIC_LATENCY_MS),
            latency_hist=hist,
        )
        for second in range(now - 60, now + TRAFFIC_AHEAD_S)
    ]
    seconds = range(now - 60, now + TRAFFIC_AHEAD_S)
    timed = [IngressRow(model, second, TRAFFIC_RPS, int(second % 5 == 0),
                        sum(INGRESS_LATENCY_MS), at_ingress) for second in seconds]  # fmt: skip
    samples = SampleStore(sample_store_path(data_dir))
    try:
        samples.record_traffic(rows, keep_s=2.0 * TRAFFIC_AHEAD_S)
        samples.record_ingress(timed, seconds, keep_s=2.0 * TRAFFIC_AHEAD_S)
    finally:
        samples.close()


def joint_window_result(
    planned: dict[str, Any], retrained: str, config: str, gate_passed: bool = True
) -> dict[str, Any]:
    """What an edge server's ``ekya-window`` job keeps when stream ``retrained`` of the
    ``planned`` window retrained with ``config`` (the runtime's own result document); the
    retrained model measures 0.68 against the deployed model's 0.61, or, when it failed the
    gate, against 0.71."""
    from deepedge.planning.window.documents import WindowPlan
    from deepedge.runtime.edge.edge_retraining import JointWindowResult, RetrainingWindowResult

    outcome = RetrainingWindowResult(
        state=None, accuracy_before=0.61 if gate_passed else 0.71, retrained=config,
        estimated_accuracy=0.7, validation_accuracy=0.68, train_s=4.2,
        configs=({"name": config, "accuracy_after": 0.7, "gpu_seconds": 30.0},), plans=(),
        profiling_s=1.5, validation_samples=40, gate_passed=gate_passed, estimate_error=0.02,
    )  # fmt: skip
    joint = JointWindowResult({retrained: outcome}, (WindowPlan.model_validate(planned),))
    document = {"scheduler": "thief", "device": "cpu", "edge_server": "edge-1",
                "gpus": planned["gpus"], **joint.summary()}  # fmt: skip
    return json.loads(json.dumps(document))
