"""The control loop's decisions as pure functions, table-driven: facts in, a step out,
every verdict on the evidence the samples give (and undecided when they give too little)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from deepedge.controlplane.deployment_spec import DeploymentSpec, UpdatePolicy
from deepedge.controlplane.deployments import Step, VersionChange
from deepedge.controlplane.evidence import Accuracy, PairedComparison, paired_from_counts, wilson
from deepedge.controlplane.records import (
    DeploymentId,
    DeploymentRecord,
    EventKind,
    ModelVersion,
    TriggerKind,
    WindowPoint,
)
from deepedge.controlplane.recovery import (
    MAX_DRIFT_WINDOWS,
    RECOVERY_WINDOWS,
    drift_windows,
    level_before,
    lineage_windows,
    recovery_under_way,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.transitions import gate, window
from deepedge.controlplane.version_steps import CANARY_SHARE, SHADOW, checked, evidence_metrics
from deepedge.controlplane.window_facts import Policy, WindowFacts
from deepedge.core.errors import IllegalTransitionError
from deepedge.service.records import TenantId

D, V = DeploymentStatus, VersionStatus
SPEC = DeploymentSpec.model_validate(
    {"name": "cam", "canary": {"windows": 1, "max_windows": 4}, "update": {"hard_fraction": 0.0}}
)  # (counts as said)
POLICY = Policy.of(SPEC)


def deployment(**fields: Any) -> DeploymentRecord:
    base: dict[str, Any] = dict(
        id=DeploymentId("d"), tenant_id=TenantId("t"), name="cam", spec=SPEC, status=D.ACTIVE,
        version=1, created_at=0.0, updated_at=0.0, serving_version=2, canary_version=None,
        previous_version=None, window=9, next_window_at=10.0, last_update_window=None,
        samples_since_update=0, canary_windows_done=0, update_requested=False,
        current_job_id=None, last_accuracy=None,
    )  # fmt: skip
    return DeploymentRecord(**{**base, **fields})


def version(number: int, status: VersionStatus, **metrics: float) -> ModelVersion:
    return ModelVersion(DeploymentId("d"), number, number - 1 or None, None, status, None,
                        (), dict(metrics), "", 0, 0.0, 0.0)  # fmt: skip


def served(right: int, n: int) -> Accuracy:
    return Accuracy(n, right, *wilson(right, n, 0.95))


def pair(both: int, a_only: int, b_only: int, neither: int) -> PairedComparison:
    return paired_from_counts(both, a_only, b_only, neither, 0.95)


def point(index: int, accuracy: float | None, samples: int = 40, version: int = 2) -> WindowPoint:
    return WindowPoint(index, 0.0, 0.0, version, accuracy, None, None, None, None, samples,
                       TriggerKind.NONE, 0.0)  # fmt: skip


def facts(**fields: Any) -> WindowFacts:
    base: dict[str, Any] = dict(
        index=10, due_at=10.0, now=10.5, window_s=1.0,
        versions={1: version(1, V.RETIRED), 2: version(2, V.SERVING)},
        served=served(38, 40), versus_previous=None, canary_versus_serving=None,
        history=[point(i, 0.95) for i in range(10)], samples=40, severity=0.0,
    )  # fmt: skip
    return WindowFacts(**{**base, **fields})


def kinds(step: Step) -> list[EventKind]:
    return [e.kind for e in step.events]


def status_of(step: Step, number: int) -> VersionStatus | None:
    found = [c.status for c in step.versions if c.number == number and c.status is not None]
    return found[-1] if found else None


# -- the gate ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comparison", "verdict", "says"),
    [
        (None, V.REJECTED, "0 held-out samples"),
        (pair(5, 6, 0, 1), V.REJECTED, "12 held-out samples, fewer than the 20"),
        (pair(60, 25, 2, 13), V.CANARY, "passed"),  # clearly better
        # looks better, not shown so: its canary decides on live traffic
        (pair(60, 6, 4, 30), V.CANARY, "its canary decides"),
        (pair(60, 5, 5, 30), V.REJECTED, "not better"),  # as good: no sign of a gain
        (pair(60, 2, 25, 13), V.REJECTED, "not better"),  # worse
    ],
)
def test_gate(comparison: PairedComparison | None, verdict: VersionStatus, says: str) -> None:
    current = deployment(status=D.UPDATING)
    step = gate(POLICY, current, version(3, V.CANDIDATE), comparison, 2,
                [VersionChange(3, V.CANDIDATE)], [], ["n1"])  # fmt: skip
    assert status_of(step, 3) is verdict
    assert any(says in e.message for e in step.events), [e.message for e in step.events]
    if comparison is not None and comparison.n:  # the evidence goes with the verdict
        assert any(e.detail.get("n") == comparison.n for e in step.events)
    if verdict is V.CANARY and comparison is not None and comparison.low <= 0:
        # without a canary to judge it, a gain not shown is no gain
        no_canary = gate(POLICY, current, version(3, V.CANDIDATE), comparison, 2,
                         [VersionChange(3, V.CANDIDATE)], [], ["n1"], skip_canary=True)
        assert status_of(no_canary, 3) is V.REJECTED


@pytest.mark.parametrize(
    ("comparison", "during_recovery", "verdict"),
    [(pair(60, 25, 2, 13), False, V.SERVING),  # shown better: serves at once
     (pair(60, 25, 2, 13), True, V.CANARY),  # the deployment asks for a canary anyway
     (pair(60, 6, 4, 30), False, V.CANARY)],  # undecided: its canary decides, as ever
)  # fmt: skip
def test_a_recoverys_update_shown_better_serves_at_once(
    comparison: PairedComparison, during_recovery: bool, verdict: VersionStatus
) -> None:
    policy = dataclasses.replace(POLICY, canary_during_recovery=during_recovery)
    recovery = version(3, V.CANDIDATE, recovery_update=1.0)
    step = gate(policy, deployment(status=D.UPDATING), recovery, comparison, 2,
                [VersionChange(3, V.CANDIDATE)], [], ["n1"])  # fmt: skip
    assert status_of(step, 3) is verdict
    if verdict is V.SERVING:
        assert step.deployment["serving_version"] == 3
        assert any("a recovery's update shown better" in e.message for e in step.events)


def test_a_drops_and_a_follow_ups_update_are_recoverys() -> None:
    """The trigger marks the versions a recovery makes (its gate reads the mark)."""
    history = [point(i, 0.97, 40) for i in range(10)]
    dropped = window(POLICY, deployment(), facts(history=history, served=served(25, 100),
                                                  samples=100, kept=()), busy=False)  # fmt: skip
    assert dropped.trigger is TriggerKind.ACCURACY_DROP
    (new,) = dropped.step.new_versions
    assert new.metrics.get("recovery_update") == 1.0
    routine = window(POLICY, deployment(samples_since_update=POLICY.sample_count + 1),
                     facts(history=history, served=served(39, 40), kept=()), busy=False)
    assert routine.trigger is TriggerKind.SAMPLE_COUNT
    assert "recovery_update" not in routine.step.new_versions[0].metrics


# -- rollback ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "now", "rolls_back"),
    [
        ({}, pair(2, 1, 30, 7), True),  # one window of 40, much worse: rolled back at once
        ({}, pair(2, 1, 8, 1), False),  # 12 samples: too few, whatever they say
        (evidence_metrics(pair(4, 1, 9, 1), SHADOW), pair(4, 1, 8, 2), True),  # accumulates
        ({}, pair(30, 4, 3, 3), False),  # as good as the one it replaced
    ],
)
def test_rollback_on_the_evidence_since_serving_began(
    before: dict[str, float], now: PairedComparison, rolls_back: bool
) -> None:
    current = deployment(previous_version=1)
    versions = {1: version(1, V.RETIRED), 2: version(2, V.SERVING, **before)}
    verdict = window(POLICY, current, facts(versions=versions, versus_previous=now), busy=False)
    assert (status_of(verdict.step, 2) is V.ROLLED_BACK) is rolls_back
    if rolls_back:
        assert verdict.step.deployment["serving_version"] == 1
        (event,) = [e for e in verdict.step.events if e.kind is EventKind.ROLLED_BACK]
        assert "n=" in event.message and event.detail["high"] < 0
        assert verdict.trigger is TriggerKind.NONE  # one verdict a window
    else:
        stored = [c.metrics for c in verdict.step.versions if c.number == 2 and c.metrics]
        assert stored and stored[-1][f"{SHADOW}_f"] >= now.a_only  # kept for the next


# -- the canary --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("done", "before", "now", "outcome"),
    [
        (0, {}, pair(20, 15, 1, 4), "promoted"),  # clearly better on its share
        (0, {}, pair(5, 0, 15, 0), "rolled-back"),  # clearly worse
        (0, {}, pair(5, 1, 1, 1), "undecided"),  # 8 samples
        (1, evidence_metrics(pair(5, 1, 1, 1), CANARY_SHARE), pair(6, 2, 1, 1), "undecided"),
        (3, {}, pair(16, 2, 2, 2), "rolled-back"),  # its last window, still undecided:
        # (no evidence it is as good: what serves stays)
        (3, {}, pair(5, 1, 1, 1), "rolled-back"),  # its last window, too few samples
    ],
)
def test_canary_verdict_on_its_evidence(
    done: int, before: dict[str, float], now: PairedComparison, outcome: str
) -> None:
    current = deployment(status=D.CANARY, canary_version=3, canary_windows_done=done)
    versions = {2: version(2, V.SERVING), 3: version(3, V.CANARY, **before)}
    verdict = window(POLICY, current, facts(versions=versions, canary_versus_serving=now),
                     busy=False)  # fmt: skip
    events = kinds(verdict.step)
    if outcome == "promoted":
        assert EventKind.PROMOTED in events and status_of(verdict.step, 3) is V.SERVING
        assert status_of(verdict.step, 2) is V.RETIRED
    elif outcome == "rolled-back":
        assert EventKind.ROLLED_BACK in events and status_of(verdict.step, 3) is V.ROLLED_BACK
    else:
        assert EventKind.UNDECIDED in events and status_of(verdict.step, 3) is None
        (stored,) = [c.metrics for c in verdict.step.versions if c.number == 3 and c.metrics]
        assert stored[f"{CANARY_SHARE}_e"] == before.get(f"{CANARY_SHARE}_e", 0) + now.both


@pytest.mark.parametrize(
    ("canary_now", "overtaken"),
    [(pair(60, 2, 4, 134), True),  # no better than what serves on the drifted window
     (pair(60, 70, 4, 66), False)],  # better there: the drift's own fix, judged as usual
)  # fmt: skip
def test_a_drift_overtakes_a_canary_and_its_update_starts_in_the_same_window(
    canary_now: PairedComparison, overtaken: bool
) -> None:
    """A routine canary runs when the inputs drift: served 0.3 on 200 samples. A canary no
    better there learned what no longer comes: rolled back, and the drift's update starts
    in the same window (CANARY -> UPDATING), not after the canary's verdict."""
    current = deployment(status=D.CANARY, canary_version=3, canary_windows_done=1)
    versions = {2: version(2, V.SERVING), 3: version(3, V.CANARY)}
    seen = facts(versions=versions, served=served(60, 200), samples=200,
                 canary_versus_serving=canary_now)  # fmt: skip
    verdict = window(POLICY, current, seen, busy=False)
    if overtaken:
        assert status_of(verdict.step, 3) is V.ROLLED_BACK
        assert verdict.trigger is TriggerKind.ACCURACY_DROP
        assert verdict.step.deployment["status"] is D.UPDATING
        (new,) = verdict.step.new_versions
        assert new.parent == 2
        assert any("drift overtook" in e.message for e in verdict.step.events)
    else:
        assert status_of(verdict.step, 3) is V.SERVING and not verdict.step.new_versions


def test_a_canary_a_drift_overtook_is_rolled_back_once_when_a_kept_version_serves_again() -> None:
    """The drift that overtook the canary is a condition kept v1 learned: v1 serves again in
    the same window, and the canary's rollback is one change (the store refuses a second)."""
    current = deployment(status=D.CANARY, canary_version=3, canary_windows_done=1)
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                2: version(2, V.SERVING, data_severity=1.0),
                3: version(3, V.CANARY, data_severity=1.0)}  # fmt: skip
    kept = ((1, pair(60, 120, 2, 18)),)
    seen = facts(versions=versions, served=served(60, 200), samples=200, severity=0.02,
                 canary_versus_serving=pair(60, 2, 4, 134), kept=kept)  # fmt: skip
    verdict = window(POLICY, current, seen, busy=False)
    rolled = [c for c in verdict.step.versions if c.number == 3 and c.status is not None]
    assert [c.status for c in rolled] == [V.ROLLED_BACK]
    assert verdict.step.deployment["serving_version"] == 1
    assert verdict.step.deployment["canary_version"] is None



def _routine_update_under_way(trigger: TriggerKind, right: int, n: int,
                              policy: str = "model-update") -> Any:  # fmt: skip
    """v3 trains, started by ``trigger`` in window 7, while window 10 serves ``right`` of
    ``n`` after ten windows at 0.95."""
    history = [point(i, 0.95, 40) for i in range(10)]
    history[7] = dataclasses.replace(history[7], trigger=trigger)
    chosen = SPEC.update.model_copy(update={"policy": UpdatePolicy(policy)})
    spec = SPEC.model_copy(update={"update": chosen})
    current = deployment(status=D.UPDATING, current_job_id="job-3", last_update_window=7,
                         spec=spec)  # fmt: skip
    versions = {2: version(2, V.SERVING), 3: version(3, V.TRAINING)}
    seen = facts(history=history, served=served(right, n), samples=n, versions=versions,
                 kept=())  # fmt: skip
    return window(Policy.of(spec), current, seen, busy=True)


@pytest.mark.parametrize(("trigger", "name"), [(TriggerKind.SAMPLE_COUNT, "routine update"),
                                               (TriggerKind.FOLLOW_UP, "follow-up")])
def test_a_drift_overtakes_a_routine_update_and_its_own_starts_in_the_same_window(
    trigger: TriggerKind, name: str
) -> None:
    """A sample-count update of the first scene, or a follow-up of it, trains when the
    drift comes (served 0.3 on 200): it learns what no longer comes, so it is cancelled
    (its job halts) and the drift's update starts from what serves, in the same window."""
    verdict = _routine_update_under_way(trigger, 60, 200)
    assert status_of(verdict.step, 3) is V.CANCELLED
    assert verdict.trigger is TriggerKind.ACCURACY_DROP
    assert verdict.step.deployment["status"] is D.UPDATING
    assert verdict.step.deployment["last_update_window"] == 10
    (new,) = verdict.step.new_versions
    assert new.number == 4 and new.parent == 2
    (cancelled,) = [e for e in verdict.step.events if e.kind is EventKind.CANCELLED]
    assert cancelled.version == 3 and f"drift overtook its {name}" in cancelled.message
    assert cancelled.detail["n"] == 200


def test_every_label_an_update_learns_from_counts_towards_the_sample_count() -> None:
    """A window of 15 uniform labels and 15 least-sure answers labelled: 30 count."""
    seen = facts(served=served(14, 15), samples=15, trainable=30, kept=(),
                 versions={2: version(2, V.SERVING)})  # fmt: skip
    verdict = window(POLICY, deployment(samples_since_update=100), seen, busy=False)
    assert verdict.step.deployment["samples_since_update"] == 130
    uncounted = dataclasses.replace(seen, trainable=0)  # not counted: the uniform ones
    verdict = window(POLICY, deployment(samples_since_update=100), uncounted, busy=False)
    assert verdict.step.deployment["samples_since_update"] == 115


def test_a_drifts_own_follow_up_is_not_overtaken_by_its_drift() -> None:
    """A follow-up the drift's chain started (window 9, in the run of windows below the
    bar since 7) trains while the site still serves below the bar: it learns the drift, and
    goes on."""
    history = [point(i, 0.95, 40) for i in range(7)] + [point(i, 0.5, 200) for i in (7, 8, 9)]
    history[7] = dataclasses.replace(history[7], trigger=TriggerKind.ACCURACY_DROP)
    history[9] = dataclasses.replace(history[9], trigger=TriggerKind.FOLLOW_UP)
    current = deployment(status=D.UPDATING, current_job_id="job-3", last_update_window=9)
    versions = {2: version(2, V.SERVING), 3: version(3, V.TRAINING)}
    seen = facts(history=history, served=served(120, 200), samples=200, versions=versions,
                 kept=())  # fmt: skip
    verdict = window(POLICY, current, seen, busy=True)
    assert status_of(verdict.step, 3) is None and not verdict.step.new_versions


@pytest.mark.parametrize(
    ("trigger", "right", "n", "policy"),
    [(TriggerKind.SAMPLE_COUNT, 38, 40, "model-update"),  # no drift: it trains on
     (TriggerKind.SAMPLE_COUNT, 6, 10, "model-update"),  # too few labels to tell one
     (TriggerKind.ACCURACY_DROP, 60, 200, "model-update"),  # a drift's own update
     (TriggerKind.REQUEST, 60, 200, "model-update"),  # an operator asked for it
     (TriggerKind.SAMPLE_COUNT, 60, 200, "ekya-window")],  # an edge server's window
)
def test_only_a_routine_update_a_drift_shows_stale_is_overtaken(
    trigger: TriggerKind, right: int, n: int, policy: str
) -> None:
    verdict = _routine_update_under_way(trigger, right, n, policy)
    assert status_of(verdict.step, 3) is None
    assert not verdict.step.new_versions and "status" not in verdict.step.deployment
    assert EventKind.CANCELLED not in kinds(verdict.step)


# -- the trigger --------------------------------------------------------------------------


def test_a_drift_below_the_level_before_it_triggers_above_the_threshold() -> None:
    """Served 0.95 for ten windows, now 0.85 on 200 samples: above the threshold (0.8) but
    below the level less the margin: an update, on the drifted windows only."""
    history = [point(i, 0.95) for i in range(8)] + [point(8, 0.86, 200), point(9, 0.84, 200)]
    verdict = window(POLICY, deployment(), facts(history=history, served=served(170, 200),
                                                 samples=200,
                                                 versions={2: version(2, V.SERVING)}),
                     busy=False)  # fmt: skip
    assert verdict.trigger is TriggerKind.ACCURACY_DROP
    (new,) = verdict.step.new_versions
    assert new.data_windows == (8, 9, 10) and new.parent == 2


@pytest.mark.parametrize(
    ("right", "n", "triggers"),
    [(22, 40, True), (29, 40, False), (38, 40, False)],  # 0.55; 0.725 (could be 0.8); 0.95
)
def test_the_drift_needs_the_interval_below_the_bar(right: int, n: int, triggers: bool) -> None:
    history = [point(i, 0.80, 10) for i in range(10)]  # (level 0.80: the bar is 0.77)
    no_kept = {2: version(2, V.SERVING)}
    seen = facts(history=history, served=served(right, n), versions=no_kept, samples=n)
    verdict = window(POLICY, deployment(), seen, busy=False)
    told = verdict.trigger is TriggerKind.ACCURACY_DROP or any(
        "accuracy-drop update waits" in text for _, text in verdict.notes
    )
    assert told is triggers


def test_a_slow_stream_tells_a_drift_over_a_few_windows() -> None:
    """10 labelled samples a window: this window alone says nothing; pooled with the three
    before it (the same version served them) it says drift."""
    history = [point(i, 0.95, 10) for i in range(6)] + [point(i, 0.5, 10) for i in range(6, 10)]
    verdict = window(POLICY, deployment(), facts(history=history, served=served(5, 10),
                                                 samples=10,
                                                 versions={2: version(2, V.SERVING)}),
                     busy=False)  # fmt: skip
    assert [kind for kind, _ in verdict.notes] == ["waits-for-samples"]  # (50 of 80 so far)
    assert (
        "accuracy-drop update waits for samples: 50 labelled in windows 6-10"
        in (verdict.notes[0][1])
    )


@pytest.mark.parametrize(("shorts", "short_next"), [(0, True), (2, True), (3, False)])
def test_a_drifts_update_waiting_for_samples_reads_them_after_a_short_window(
    shorts: int, short_next: bool
) -> None:
    """The drift's first window holds 62 of the 80 labels its update needs: the next window
    is short (0.4 of window_s), so the update starts seconds later, not a window later; not
    after four short windows in a row."""
    history = [dataclasses.replace(p, served_version=2, accuracy=0.95, samples=40)
               for p in _short_history(shorts)]  # fmt: skip
    due = history[-1].due_at + (0.4 if shorts else 1.0)
    lean = facts(index=len(history), history=history, served=served(11, 31), samples=31,
                 trainable=62, kept=(), versions={2: version(2, V.SERVING)}, due_at=due,
                 now=due + 0.1)  # fmt: skip
    verdict = window(POLICY, deployment(), lean, busy=False)
    assert verdict.trigger is TriggerKind.NONE
    assert "waits-for-samples" in [kind for kind, _ in verdict.notes]
    length = verdict.step.deployment["next_window_at"] - due
    assert length == pytest.approx(0.4 if short_next else 1.0)
    assert ("the next window is short" in " ".join(t for _, t in verdict.notes)) is short_next


def test_an_update_waits_for_the_samples_it_needs_and_says_so_once() -> None:
    history = [point(i, 0.95) for i in range(9)] + [point(9, 0.5, 10)]
    lean = facts(history=history, served=served(10, 20), samples=20,
                 versions={2: version(2, V.SERVING)})  # fmt: skip
    verdict = window(POLICY, deployment(), lean, busy=False)
    assert verdict.trigger is TriggerKind.NONE and not verdict.step.new_versions
    (event,) = [e for e in verdict.step.events if e.kind is EventKind.UNDECIDED]
    assert "waits for samples: 30 labelled" in event.message and "80 needed" in event.message
    again = window(POLICY, deployment(), dataclasses.replace(lean, last_undecided=event.detail[
        "reason"]), busy=False)  # fmt: skip
    assert EventKind.UNDECIDED not in kinds(again.step)  # a streak is said once


@pytest.mark.parametrize(("trainable", "trains"), [(58, False), (0, True), (96, True)])
def test_the_windows_own_labels_are_counted_not_estimated(trainable: int, trains: bool) -> None:
    """A drift's first window labelled whole (58 labels, none of them chosen apart): with
    half the labels usually chosen to teach, its uniform 58 would read as 116, and an
    update on them would hold 14 out for a gate that needs 20. Counted, it waits."""
    policy = dataclasses.replace(POLICY, hard_share=0.5)
    history = [point(i, 0.95) for i in range(10)]
    drop = facts(history=history, served=served(12, 58), samples=58, trainable=trainable,
                 kept=())  # fmt: skip
    verdict = window(policy, deployment(), drop, busy=False)
    assert bool(verdict.step.new_versions) is trains


def test_a_kept_version_that_fits_serves_again_without_training() -> None:
    """The recurring condition: v1 served this scene before; scored on the window it is
    clearly better than v2, so it serves at once."""
    drift = facts(served=served(12, 40), samples=40)
    first = window(POLICY, deployment(), drift, busy=False)
    assert first.wants_kept and not first.step.new_versions  # scored before any training
    kept = ((1, pair(10, 27, 2, 1)),)
    verdict = window(POLICY, deployment(), dataclasses.replace(drift, kept=kept), busy=False)
    assert status_of(verdict.step, 1) is V.SERVING and status_of(verdict.step, 2) is V.RETIRED
    assert not verdict.step.new_versions and verdict.step.deployment["serving_version"] == 1
    (event,) = [e for e in verdict.step.events if e.kind is EventKind.PROMOTED]
    assert event.detail["restored"] is True and "n=40" in event.message


def test_a_kept_version_clearly_better_serves_again_without_a_drop() -> None:
    """The serving version is at its level (no drift told), yet a kept one is clearly
    better on this window: the condition it was trained for came back, it serves at once."""
    level = [point(i, 0.9, 100) for i in range(10)]
    calm = facts(served=served(90, 100), samples=100, history=level)
    assert window(POLICY, deployment(), calm, busy=False).wants_kept
    kept = ((1, pair(88, 11, 1, 0)),)
    verdict = window(POLICY, deployment(), dataclasses.replace(calm, kept=kept), busy=False)
    assert verdict.step.deployment["serving_version"] == 1


def test_a_kept_version_serves_again_while_an_update_trains_which_goes_on() -> None:
    """A condition that comes back while an update trains is served by its kept version
    at once; the job goes on (gated later against what serves then)."""
    level = [point(i, 0.9, 100) for i in range(10)]
    calm = facts(served=served(90, 100), samples=100, history=level,
                 versions={1: version(1, V.RETIRED), 2: version(2, V.SERVING),
                           3: version(3, V.TRAINING)})  # fmt: skip
    updating = deployment(status=D.UPDATING, current_job_id="job-3")
    first = window(POLICY, updating, calm, busy=True)
    assert first.wants_kept and not first.step.events
    kept = ((1, pair(88, 11, 1, 0)),)
    verdict = window(POLICY, updating, dataclasses.replace(calm, kept=kept), busy=True)
    assert verdict.step.deployment["serving_version"] == 1
    assert "status" not in verdict.step.deployment  # still updating
    assert "current_job_id" not in verdict.step.deployment  # its job goes on
    assert status_of(verdict.step, 3) is None and status_of(verdict.step, 2) is V.RETIRED
    assert not verdict.step.new_versions


def test_a_kept_version_serving_again_rolls_a_canary_back() -> None:
    level = [point(i, 0.9, 100) for i in range(10)]
    versions = {1: version(1, V.RETIRED), 2: version(2, V.SERVING), 3: version(3, V.CANARY)}
    calm = facts(served=served(90, 100), samples=100, history=level, versions=versions,
                 canary_versus_serving=pair(2, 1, 1, 1))  # fmt: skip
    live = deployment(status=D.CANARY, canary_version=3)
    kept = ((1, pair(88, 11, 1, 0)),)
    verdict = window(POLICY, live, dataclasses.replace(calm, kept=kept), busy=False)
    assert verdict.step.deployment["serving_version"] == 1
    assert verdict.step.deployment["status"] is D.ACTIVE
    assert verdict.step.deployment["canary_version"] is None
    assert status_of(verdict.step, 3) is V.ROLLED_BACK
    assert kinds(verdict.step).count(EventKind.ROLLED_BACK) == 1


def test_a_kept_version_does_not_roll_back_a_canary_that_gains_more() -> None:
    """Both beat what serves on the window; the canary by more: its verdict decides (here
    it is promoted), the kept version does not serve again."""
    level = [point(i, 0.9, 100) for i in range(10)]
    versions = {1: version(1, V.RETIRED), 2: version(2, V.SERVING), 3: version(3, V.CANARY)}
    ahead = facts(served=served(40, 100), samples=100, history=level, versions=versions,
                  canary_versus_serving=pair(40, 30, 0, 30),
                  kept=((1, pair(40, 10, 0, 50)),))  # fmt: skip
    verdict = window(POLICY, deployment(status=D.CANARY, canary_version=3), ahead, busy=False)
    assert verdict.step.deployment.get("serving_version") == 3
    assert status_of(verdict.step, 3) is not V.ROLLED_BACK


@pytest.mark.parametrize(
    ("kept_table", "serves"),
    [(None, None), ((120, 25, 0, 5), 1), ((120, 0, 25, 5), 3)],
)  # not scored yet: scored first; it fits: it serves; it is worse: the canary is promoted
def test_a_canary_waits_for_a_kept_version_the_returned_inputs_look_like(
    kept_table: tuple[int, int, int, int] | None, serves: int | None
) -> None:
    """The condition v1 learned came back (severity 0.02; v2 and its canary v3 learned
    another, 1.0): v3, shown no worse than v2 on this window, is not promoted before v1 is
    scored on it; v1 serves if it fits, else v3 is promoted."""
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                2: version(2, V.SERVING, data_severity=1.0),
                3: version(3, V.CANARY, data_severity=1.0)}  # fmt: skip
    seen = facts(versions=versions, severity=0.02, served=served(120, 150), samples=150,
                 canary_versus_serving=pair(120, 10, 5, 15),
                 kept=None if kept_table is None else ((1, pair(*kept_table)),))  # fmt: skip
    verdict = window(POLICY, deployment(status=D.CANARY, canary_version=3), seen, busy=False)
    assert verdict.step.deployment.get("serving_version") == serves
    if serves is None:  # held, and the kept version asked for
        assert verdict.wants_kept and status_of(verdict.step, 3) is None
        assert "a kept version's data" in verdict.notes[0][1]
    elif serves == 1:
        assert status_of(verdict.step, 3) is V.ROLLED_BACK


@pytest.mark.parametrize(("serving_data", "severity", "rolls_back"),
                         [(0.0, 0.05, True),  # on what it learned: worse, rolled back
                          (0.0, 0.9, False),  # a new condition: both off their data
                          (None, 0.9, True)])  # an upload: always watched  # fmt: skip
def test_the_rollback_watch_pauses_on_inputs_far_from_what_the_version_learned(
    serving_data: float | None, severity: float, rolls_back: bool
) -> None:
    described = {} if serving_data is None else {"data_severity": serving_data}
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                2: version(2, V.SERVING, **described)}  # fmt: skip
    current = deployment(previous_version=1)
    verdict = window(POLICY, current, facts(versions=versions, versus_previous=pair(2, 1, 30, 7),
                                            severity=severity), busy=False)  # fmt: skip
    assert (status_of(verdict.step, 2) is V.ROLLED_BACK) is rolls_back
    if not rolls_back:
        assert any("rollback watch pauses" in e.message for e in verdict.step.events)


@pytest.mark.parametrize(
    ("serving_data", "kept_data", "table", "restored"),
    [(0.9, 0.0, (140, 4, 1, 5), True),  # looks like v1's data, not v2's; no worse: back
     (0.05, 0.0, (140, 4, 1, 5), False),  # v2 learned such inputs too: labels must decide
     (0.9, 0.4, (140, 4, 1, 5), False),  # nor v1's data
     (0.9, 0.0, (140, 1, 4, 5), False),  # behind on the census
     (0.9, 0.0, (24, 1, 0, 5), False),  # 30 uniform labels cannot show it no worse
     (None, 0.0, (140, 4, 1, 5), False)],  # an upload serving: nothing to compare with
)  # fmt: skip
def test_a_kept_version_whose_data_the_window_looks_like_serves_again_when_no_worse(
    serving_data: float | None, kept_data: float, table: tuple[int, int, int, int],
    restored: bool,
) -> None:  # fmt: skip
    """A non-inferiority test: the serving version never learned inputs like these, the
    kept one did; with the census's evidence it serves again unless it is behind or may
    be worse by more than the rollback tolerance."""
    described = {} if serving_data is None else {"data_severity": serving_data}
    versions = {1: version(1, V.RETIRED, data_severity=kept_data),
                2: version(2, V.SERVING, **described)}  # fmt: skip
    calm = facts(versions=versions, severity=0.02, served=served(140, 150), samples=30)
    kept = ((1, paired_from_counts(*table, 0.95)),)
    verdict = window(POLICY, deployment(), dataclasses.replace(calm, kept=kept), busy=False)
    assert (verdict.step.deployment.get("serving_version") == 1) is restored
    if restored:
        (event,) = [e for e in verdict.step.events if e.kind is EventKind.PROMOTED]
        assert event.detail["data_severity"] == 0.0 and event.detail["window_severity"] == 0.02


def test_of_the_kept_versions_the_window_looks_like_the_census_best_serves() -> None:
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                3: version(3, V.RETIRED, data_severity=0.1),
                4: version(4, V.SERVING, data_severity=0.9)}  # fmt: skip
    calm = facts(versions=versions, severity=0.02, served=served(140, 150), samples=30)
    kept = ((1, paired_from_counts(140, 4, 2, 4, 0.95)),
            (3, paired_from_counts(140, 7, 1, 2, 0.95)))
    current = deployment(serving_version=4)
    verdict = window(POLICY, current, dataclasses.replace(calm, kept=kept), busy=False)
    assert verdict.step.deployment.get("serving_version") == 3  # +4 points, not v1's +1.3


def test_a_kept_versions_census_is_pooled_over_the_windows_that_look_like_its_data() -> None:
    """One window's census leaves a 3-point gain short of the non-inferiority margin; with
    the window before it (same condition, same serving version) it clears it."""
    window_table = (135, 4, 2, 9)  # 150 requests: +1.3 points, the interval below -0.02
    alone = paired_from_counts(*window_table, 0.95)
    assert alone.low <= -POLICY.tolerance
    def run(before: dict[str, float]) -> Step:
        versions = {1: version(1, V.RETIRED, data_severity=0.0, **before),
                    2: version(2, V.SERVING, data_severity=0.9)}  # fmt: skip
        calm = facts(versions=versions, severity=0.02, served=served(140, 150), samples=30,
                     kept=((1, alone),))  # fmt: skip
        return window(POLICY, deployment(), calm, busy=False).step
    first = run({})
    assert "serving_version" not in first.deployment
    (stored,) = [c.metrics for c in first.versions if c.number == 1 and c.metrics]
    assert stored["kept_window"] == 10 and stored["kept_against"] == 2
    pooled = evidence_metrics(alone, "kept")
    assert run({**pooled, "kept_against": 2.0, "kept_window": 9.0}).deployment[
        "serving_version"] == 1  # fmt: skip
    # not the window just before, or against another serving version: not pooled
    assert "serving_version" not in run({**pooled, "kept_against": 2.0, "kept_window": 7.0}
                                        ).deployment  # fmt: skip
    assert "serving_version" not in run({**pooled, "kept_against": 3.0, "kept_window": 9.0}
                                        ).deployment  # fmt: skip


def test_of_the_kept_versions_shown_better_one_the_window_looks_like_serves_again() -> None:
    """Two kept versions beat the serving one (v4, which learned a drift) on the returned
    first scene: v1 learned that scene, v3 a ramp far from it. v1 serves again, although
    v3's point estimate is higher; without v1 among the better, v3 does."""
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                3: version(3, V.RETIRED, data_severity=0.95),
                4: version(4, V.SERVING, data_severity=1.0)}  # fmt: skip
    v1_better = paired_from_counts(200, 20, 4, 16, 0.95)  # +6.7 points on 240
    v3_better = paired_from_counts(95, 14, 3, 8, 0.95)  # +9.2 points on 120
    assert v1_better.low > 0 and v3_better.low > 0 and v3_better.diff > v1_better.diff

    def served_again(kept: tuple[tuple[int, Any], ...]) -> Any:
        calm = facts(versions=versions, severity=0.0, served=served(100, 120), samples=30,
                     kept=kept)  # fmt: skip
        step = window(POLICY, deployment(serving_version=4), calm, busy=False).step
        return step.deployment.get("serving_version")

    assert served_again(((1, v1_better), (3, v3_better))) == 1
    v1_even = paired_from_counts(200, 8, 8, 24, 0.95)
    assert served_again(((1, v1_even), (3, v3_better))) == 3


def test_the_no_worse_test_shares_its_confidence_among_the_versions_the_window_looks_like() -> None:
    """Kept versions are scored at a confidence shared by all of them (here four); the
    no-worse test reads only those the inputs look like, chosen before any label, so one
    such version is tested at the deployment's own confidence, two share it."""
    table = (80, 7, 2, 2)  # +5.5 points on 91 requests
    shared = paired_from_counts(*table, 1.0 - 0.05 / 4)
    assert shared.low <= -POLICY.tolerance < paired_from_counts(*table, 0.95).low
    far = paired_from_counts(100, 2, 2, 6, 1.0 - 0.05 / 4)

    def run(alike: int) -> Step:
        versions = {n: version(n, V.RETIRED, data_severity=0.0 if n <= alike else 0.5)
                    for n in (1, 3, 5)} | {4: version(4, V.SERVING, data_severity=0.9)}
        kept = tuple((n, shared if n <= alike else far) for n in (1, 3, 5))
        calm = facts(versions=versions, severity=0.02, served=served(100, 110), samples=30,
                     kept=kept)  # fmt: skip
        return window(POLICY, deployment(serving_version=4), calm, busy=False).step

    assert run(1).deployment.get("serving_version") == 1
    both = paired_from_counts(*table, 1.0 - 0.05 / 2)
    assert both.low <= -POLICY.tolerance  # two alike: each at 97.5 %, not enough here
    assert "serving_version" not in run(3).deployment


def _short_history(shorts: int) -> list[WindowPoint]:
    """Ten windows of 1 s, then ``shorts`` of 0.4 s."""
    dues = [float(k) for k in range(1, 11)]
    dues += [dues[-1] + 0.4 * k for k in range(1, shorts + 1)]
    return [WindowPoint(i, due, due, 2, 0.95, None, None, None, None, 40, TriggerKind.NONE,
                        0.0) for i, due in enumerate(dues)]  # fmt: skip


@pytest.mark.parametrize(("shorts", "short_next"), [(0, True), (2, True), (3, False)])
def test_while_a_kept_versions_evidence_pools_the_windows_stay_short(
    shorts: int, short_next: bool
) -> None:
    """A window that looks like a kept version's data, the version not shown worse on it
    (nor yet better): the next window is short (0.4 of window_s), so its pooled evidence is
    read seconds later, and the operator is told why; not after four short windows in a
    row."""
    versions = {1: version(1, V.RETIRED, data_severity=0.0),
                2: version(2, V.SERVING, data_severity=0.9)}  # fmt: skip
    history = _short_history(shorts)
    due = history[-1].due_at + 0.4
    undecided = paired_from_counts(40, 3, 1, 2, 0.95)  # +4 points on 46 requests
    calm = facts(versions=versions, severity=0.02, served=served(40, 46), samples=46,
                 kept=((1, undecided),), history=history, due_at=due, now=due + 0.1)
    step = window(POLICY, deployment(), calm, busy=False).step
    assert "serving_version" not in step.deployment
    length = step.deployment["next_window_at"] - due
    assert length == pytest.approx(0.4 if short_next else 1.0)
    said = [e.message for e in step.events if e.kind is EventKind.UNDECIDED]
    assert any("look like what kept v1 learned" in m for m in said) is short_next
    # a condition's first window tells little: a kept version a request behind still pools
    even = paired_from_counts(105, 5, 6, 5, 0.95)
    step = window(POLICY, deployment(), dataclasses.replace(calm, kept=((1, even),)),
                  busy=False).step  # fmt: skip
    assert step.deployment["next_window_at"] - due == pytest.approx(0.4 if short_next else 1.0)
    behind = paired_from_counts(30, 1, 12, 3, 0.95)  # shown behind: nothing pending
    assert behind.high < 0.0
    step = window(POLICY, deployment(), dataclasses.replace(calm, kept=((1, behind),)),
                  busy=False).step  # fmt: skip
    assert step.deployment["next_window_at"] - due == pytest.approx(1.0)


def test_a_kept_version_better_on_a_drift_but_below_the_bar_serves_and_teaches_an_update() -> None:
    drift = facts(served=served(60, 200), samples=200)
    kept = ((1, pair(50, 70, 10, 70)),)  # v1 serves it at 0.6, v2 at 0.3: v1, and an update
    verdict = window(POLICY, deployment(), dataclasses.replace(drift, kept=kept), busy=False)
    assert verdict.step.deployment["serving_version"] == 1
    assert verdict.step.deployment["status"] is D.UPDATING
    (new,) = verdict.step.new_versions
    assert new.number == 3 and new.parent == 1  # learns from what serves now
    assert verdict.trigger is TriggerKind.ACCURACY_DROP


def test_a_kept_version_no_better_leaves_the_drift_to_an_update() -> None:
    drift = facts(served=served(30, 100), samples=100,
                  history=[point(i, 0.95, 200) for i in range(10)])  # fmt: skip
    no_better = ((1, pair(8, 5, 4, 23)),)
    verdict = window(POLICY, deployment(), dataclasses.replace(drift, kept=no_better), busy=False)
    assert verdict.step.new_versions and status_of(verdict.step, 1) is None


def _helped(**metrics: float) -> ModelVersion:
    """v2, trained from v1 on windows 2-7 and serving for three windows since."""
    described = version(2, V.SERVING, data_severity=0.0, **metrics)
    return dataclasses.replace(described, replaced=1, data_windows=tuple(range(2, 8)),
                               windows_served=3)  # fmt: skip


CANARY_BETTER = evidence_metrics(pair(120, 30, 5, 5), CANARY_SHARE)


def _after_an_update(right: int, accuracy: float, versions: dict[int, ModelVersion],
                     **fields: Any) -> Any:  # fmt: skip
    """Six windows of v1 at 0.97, then three of v2 at ``accuracy``; this window ``right``
    of 40."""
    history = [point(i, 0.97, 40, version=1) for i in range(7)]
    history += [point(i, accuracy, 40) for i in range(7, 10)]
    seen = facts(history=history, served=served(right, 40), versions=versions, kept=())
    return window(POLICY, deployment(last_update_window=7, **fields), seen, busy=False)


def test_an_update_shown_better_is_followed_while_the_site_is_below_its_level() -> None:
    """v2 beat v1 at its gate, but serves 0.925 where v1 served 0.97: too little below to
    show a drift on 40 labels a window (the interval reaches 0.97), enough to go on
    learning. The follow-up learns every window since v2's first, not the newest eight."""
    verdict = _after_an_update(37, 0.925, {2: _helped(gate_diff_low=0.01)})
    assert verdict.trigger is TriggerKind.FOLLOW_UP
    (new,) = verdict.step.new_versions
    assert new.data_windows == tuple(range(2, 11)) and new.parent == 2
    (said,) = [e for e in verdict.step.events if e.kind is EventKind.TRIGGER]
    assert "v2 served better than v1" in said.message


def test_a_routine_update_while_a_recovery_helps_is_its_follow_up() -> None:
    """The labels a recovery takes count up to the sample-count trigger: that update is
    the recovery's follow-up (labelled as one), not a routine one."""
    many = POLICY.sample_count + 1
    verdict = _after_an_update(37, 0.925, {2: _helped(gate_diff_low=0.01)},
                               samples_since_update=many)  # fmt: skip
    assert verdict.trigger is TriggerKind.FOLLOW_UP
    back = _after_an_update(39, 0.975, {2: _helped(gate_diff_low=0.01)},
                            samples_since_update=many)  # fmt: skip
    assert back.trigger is TriggerKind.SAMPLE_COUNT  # back at the level: routine


@pytest.mark.parametrize(("windows_served", "last_update_window", "trigger"),
                         [(0, 6, TriggerKind.FOLLOW_UP), (1, 6, TriggerKind.FOLLOW_UP),
                          (0, 7, TriggerKind.FOLLOW_UP),  # within the cooldown
                          (0, 7, TriggerKind.SAMPLE_COUNT)])  # fmt: skip
def test_a_recoverys_version_is_followed_up_not_updated_routinely(
    windows_served: int, last_update_window: int, trigger: TriggerKind
) -> None:
    """A drop's update promoted with the site still below its level: the sample count its
    recovery's labels reached starts no routine update; its follow-up comes at the end of
    the first window it serves, within the trigger's cooldown too (a young chain retrains
    every window). After a routine update the count starts the next routine one."""
    history = [point(i, 0.97, 40, version=1) for i in range(6)]
    history += [point(6, 0.3, 40, version=1), point(7, 0.92, 150)]
    drop = TriggerKind.ACCURACY_DROP if trigger is TriggerKind.FOLLOW_UP else TriggerKind.NONE
    history[last_update_window] = dataclasses.replace(history[last_update_window], trigger=drop)
    helped = dataclasses.replace(_helped(gate_diff_low=0.01), windows_served=windows_served)
    seen = facts(index=8, history=history, served=served(138, 150), kept=(),
                 versions={1: version(1, V.RETIRED), 2: helped})  # fmt: skip
    many = POLICY.sample_count + 1
    verdict = window(POLICY, deployment(last_update_window=last_update_window,
                                        samples_since_update=many), seen, busy=False)
    assert verdict.trigger is trigger


@pytest.mark.parametrize(
    ("right", "accuracy", "versions", "follows"),
    [
        (37, 0.925, {2: _helped(gate_diff_low=-0.01)}, False),  # not shown better: it stops
        # shown better by its canary instead (30 disagreements its way, 5 the other)
        (37, 0.925, {2: _helped(gate_diff_low=-0.01, **CANARY_BETTER)}, True),
        # a newer update was made and rejected: the chain ended with it
        (37, 0.925, {2: _helped(gate_diff_low=0.01), 3: version(3, V.REJECTED)}, False),
        (39, 0.975, {2: _helped(gate_diff_low=0.01)}, False),  # back at the level
    ],
)
def test_a_follow_up_only_after_an_update_shown_better_while_below_the_level(
    right: int, accuracy: float, versions: dict[int, ModelVersion], follows: bool
) -> None:
    verdict = _after_an_update(right, accuracy, versions)
    assert (verdict.trigger is TriggerKind.FOLLOW_UP) is follows


def _recovering(served: list[tuple[float, int]], trigger: TriggerKind = TriggerKind.ACCURACY_DROP,
                status: DeploymentStatus = D.ACTIVE, **versions: ModelVersion) -> bool:
    """Six windows of v1 at 0.97, a drop at window 6 (its update's ``trigger``), then v2
    serving ``served`` (accuracy, labels) a window."""
    history = [point(i, 0.97, 40, version=1) for i in range(6)]
    history.append(dataclasses.replace(point(6, 0.3, 40, version=1), trigger=trigger))
    history += [point(7 + i, a, n) for i, (a, n) in enumerate(served)]
    known = {1: version(1, V.RETIRED), 2: _helped(gate_diff_low=0.01),
             **{int(k[1:]): v for k, v in versions.items()}}  # fmt: skip
    return recovery_under_way(POLICY, deployment(status=status, last_update_window=6), known,
                              history)  # fmt: skip


def test_the_site_labels_at_the_recovery_share_until_a_recovery_shows_it_back() -> None:
    """While a drop's update or canary runs, and after, while the version it made (shown
    better than its parent) has not shown the site back at its level: its follow-up learns
    the windows since at the recovery share."""
    assert _recovering([(0.97, 40)], status=D.UPDATING, v2=version(2, V.TRAINING))  # it runs
    assert not _recovering([(0.97, 40)], trigger=TriggerKind.SAMPLE_COUNT, status=D.UPDATING,
                           v2=version(2, V.TRAINING))  # a routine update  # fmt: skip
    assert _recovering([])  # v2 serves, nothing shown yet
    assert _recovering([(0.98, 40)])  # too few labels to show it back
    assert _recovering([(0.92, 150)])  # below the level on enough
    # back at the level, but in the drift's first windows a chain that helps goes on
    assert _recovering([(0.98, 150)])
    assert not _recovering([(0.98, 150)] * RECOVERY_WINDOWS)  # back, and the drift older
    assert not _recovering([(0.92, 150)], v2=_helped(gate_diff_low=-0.01))  # not shown better
    # a young chain goes on past its follow-ups rejected at the gate, up to two in a row
    assert _recovering([(0.92, 150)], v3=version(3, V.REJECTED), v4=version(4, V.REJECTED))
    assert not _recovering([(0.92, 150)], v3=version(3, V.REJECTED), v4=version(4, V.REJECTED),
                           v5=version(5, V.REJECTED))  # fmt: skip
    assert not _recovering([(0.92, 150)], v3=version(3, V.ROLLED_BACK))  # worse on live traffic
    assert not _recovering([(0.92, 150)], trigger=TriggerKind.SAMPLE_COUNT)  # routine
    # shown below the drift's bar on the last window: whatever the updates did
    assert _recovering([(0.5, 40)], v3=version(3, V.REJECTED))
    assert _recovering([(0.97, 40), (0.5, 40)], trigger=TriggerKind.SAMPLE_COUNT)


def _estimated(gain: float, **metrics: float) -> ModelVersion:
    """v2 estimated ``gain`` over v1 at its gate, not shown better (the interval reaches
    below 0)."""
    return _helped(gate_diff_low=-0.02, gate_accuracy=0.95 + gain, parent_gate_accuracy=0.95,
                   **metrics)  # fmt: skip


@pytest.mark.parametrize(
    ("since_drop", "v2", "trigger", "follows"),
    [
        (3, _estimated(0.01), TriggerKind.ACCURACY_DROP, True),  # estimated better: goes on
        (3, _estimated(0.0), TriggerKind.ACCURACY_DROP, False),  # no gain: the chain ends
        (3, _estimated(-0.01), TriggerKind.ACCURACY_DROP, False),
        # its canary's live requests count over its gate's held-out samples
        (3, _estimated(0.01, **evidence_metrics(pair(120, 5, 10, 5), CANARY_SHARE)),
         TriggerKind.ACCURACY_DROP, False),
        (3, _estimated(-0.01, **CANARY_BETTER), TriggerKind.ACCURACY_DROP, True),
        (RECOVERY_WINDOWS, _estimated(0.01), TriggerKind.ACCURACY_DROP, False),  # too late
        (3, _estimated(0.01), TriggerKind.SAMPLE_COUNT, False),  # a routine update: no chain
    ],
)  # fmt: skip
def test_in_a_drifts_first_windows_a_chain_goes_on_while_each_update_is_estimated_better(
    since_drop: int, v2: ModelVersion, trigger: TriggerKind, follows: bool
) -> None:
    """Back above the level before the drift (0.97 against v1's 0.95), a drop's chain goes
    on while each update is estimated better than its parent and the drop is recent: the
    level is what the old condition allowed, and the new one is still being learned."""
    index = 7 + since_drop
    history = [point(i, 0.95, 40, version=1) for i in range(6)]
    history.append(dataclasses.replace(point(6, 0.3, 40, version=1), trigger=TriggerKind.NONE))
    history.append(dataclasses.replace(point(7, 0.5, 150, version=1), trigger=trigger))
    history += [point(i, 0.97, 150) for i in range(8, index)]
    seen = facts(index=index, history=history, served=served(146, 150), kept=(),
                 versions={1: version(1, V.RETIRED), 2: v2})  # fmt: skip
    verdict = window(POLICY, deployment(last_update_window=7), seen, busy=False)
    assert (verdict.trigger is TriggerKind.FOLLOW_UP) is follows
    labels_more = recovery_under_way(POLICY, deployment(last_update_window=7), seen.versions,
                                     history)  # fmt: skip
    assert labels_more is follows


@pytest.mark.parametrize(("made_since", "follows"), [
    ((V.REJECTED,), True), ((V.REJECTED, V.REJECTED), True),
    ((V.REJECTED,) * 3, False),  # three rejected in a row: the chain ends
    ((V.ROLLED_BACK,), False), ((V.FAILED,), False)])  # fmt: skip
def test_a_young_chain_goes_on_past_an_update_its_gate_rejected(
    made_since: tuple[VersionStatus, ...], follows: bool
) -> None:
    """v2 helped; the update after it was rejected at its gate (a point or so of gain is
    more than a hundred held-out samples can show): the next follow-up learns from v2 a
    window later, in the drift's first windows, up to two rejections in a row."""
    history = [point(i, 0.95, 40, version=1) for i in range(6)]
    history.append(dataclasses.replace(point(6, 0.3, 40, version=1),
                                       trigger=TriggerKind.ACCURACY_DROP))  # fmt: skip
    history += [point(7, 0.93, 150), dataclasses.replace(point(8, 0.93, 150),
                                                         trigger=TriggerKind.FOLLOW_UP)]
    versions = {1: version(1, V.RETIRED), 2: _estimated(0.02)}
    versions |= {3 + k: version(3 + k, status) for k, status in enumerate(made_since)}
    seen = facts(index=9, history=history, served=served(140, 150), kept=(), versions=versions)
    verdict = window(POLICY, deployment(last_update_window=8), seen, busy=False)
    assert (verdict.trigger is TriggerKind.FOLLOW_UP) is follows
    if follows:
        (new,) = verdict.step.new_versions
        assert new.parent == 2 and new.number == 3 + len(made_since)


def test_a_drifts_follow_up_learns_the_drift_not_the_windows_before_it() -> None:
    """v2 learned the drift's windows 6-8 (severity 1.0); its follow-up at window 10 learns
    windows 6-10, not the newest eight (3-10: five of them the condition before)."""
    history = [point(i, 0.95, 40, version=1) for i in range(6)]
    history.append(dataclasses.replace(point(6, 0.3, 40, version=1),
                                       trigger=TriggerKind.ACCURACY_DROP))  # fmt: skip
    history += [point(7, 0.8, 150), point(8, 0.9, 150),
                dataclasses.replace(point(9, 0.93, 150), trigger=TriggerKind.FOLLOW_UP)]
    history = [dataclasses.replace(p, severity=1.0 if p.window >= 6 else 0.0) for p in history]
    learned = dataclasses.replace(_estimated(0.02), data_windows=(6, 7, 8),
                                  metrics={**_estimated(0.02).metrics, "data_severity": 1.0})
    seen = facts(index=10, history=history, served=served(140, 150), samples=75, kept=(),
                 severity=1.0, versions={1: version(1, V.RETIRED), 2: learned,
                                         3: version(3, V.REJECTED)})  # fmt: skip
    verdict = window(POLICY, deployment(last_update_window=9), seen, busy=False)
    assert verdict.trigger is TriggerKind.FOLLOW_UP
    (new,) = verdict.step.new_versions
    assert new.data_windows == tuple(range(6, 11))


def test_an_update_learns_its_conditions_windows_since_the_serving_versions_first() -> None:
    learned = dataclasses.replace(version(2, V.SERVING, data_severity=1.0),
                                  data_windows=(30, 31, 32))  # fmt: skip
    assert lineage_windows(learned, 40, 0.95) == tuple(range(30, 41))
    assert lineage_windows(learned, 40, 0.2) == (40,)  # the inputs moved away from its data
    assert lineage_windows(version(2, V.SERVING), 40, 1.0) == (40,)  # its data not described
    longer = dataclasses.replace(learned, data_windows=tuple(range(30, 46)))
    assert lineage_windows(longer, 60, 1.0) == tuple(range(61 - MAX_DRIFT_WINDOWS, 61))  # at most
    assert lineage_windows(learned, 80, 1.0) == (80,)  # long ago: not this condition's run


def test_the_level_before_a_drift_and_the_windows_since() -> None:
    history = [point(i, 0.9) for i in range(2)] + [point(i, 0.96) for i in range(2, 8)]
    history += [point(8, 0.4), point(9, 0.5)]
    # the best six windows pooled (0.96 on 240 labels) less one standard error
    assert level_before(history, 20) == pytest.approx(0.96 - (0.96 * 0.04 / 240) ** 0.5)
    assert drift_windows(history, 10, 0.93) == (8, 9, 10)
    # one window back at the level by chance does not end the drift's run; two do
    noisy = [*history, point(10, 0.95), point(11, 0.5)]
    assert drift_windows(noisy, 12, 0.93) == tuple(range(8, 13))
    back = [*history, point(10, 0.95), point(11, 0.94), point(12, 0.5)]
    assert drift_windows(back, 13, 0.93) == (12, 13)
    assert level_before(history[:5], 20) is None  # fewer than six windows


def test_an_illegal_change_is_caught_before_it_is_committed() -> None:
    current = deployment()
    with pytest.raises(IllegalTransitionError):
        checked(Step(versions=(VersionChange(1, V.CANARY),)), current, {1: V.RETIRED})
    ok = Step(versions=(VersionChange(1, V.SERVING), VersionChange(2, V.RETIRED)))
    assert checked(ok, current, {1: V.RETIRED, 2: V.SERVING}) is ok


@pytest.mark.parametrize(
    ("due", "now", "end", "next_at"),
    [
        (100.0, 100.2, 100.0, 105.0),  # on time
        (100.0, 120.0, 100.0, 105.0),  # four windows behind: each in turn
        (100.0, 138.0, 138.0, 143.0),  # after a restart 38 s late: one window to now
    ],
)
def test_a_loop_far_behind_catches_up_without_a_hole(
    due: float, now: float, end: float, next_at: float
) -> None:
    from deepedge.controlplane.transitions import catch_up_end, next_due

    assert catch_up_end(due, now, 5.0) == end
    assert next_due(end, now, 5.0) == next_at


def test_the_least_sure_answers_labels_count_for_training() -> None:
    """Windows count their uniform labels; with half the labels given to the least sure
    answers, an update has twice as many to train on: 60 uniform are 120, enough."""
    spec = DeploymentSpec.model_validate({"name": "cam", "update": {"hard_fraction": 0.5}})
    history = [point(i, 0.95) for i in range(9)] + [point(9, 0.5, 30)]
    lean = facts(history=history, served=served(15, 30), samples=30,
                 versions={2: version(2, V.SERVING)})  # fmt: skip
    verdict = window(Policy.of(spec), deployment(spec=spec), lean, busy=False)
    assert verdict.trigger is TriggerKind.ACCURACY_DROP and verdict.step.new_versions
