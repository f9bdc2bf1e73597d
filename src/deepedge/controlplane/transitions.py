"""The control loop's decisions as pure functions: facts in, one :class:`Step` out.

Nothing here reads a clock, a file or the store; the loop gathers the facts (scores on the
window's golden-labelled samples, the stored versions and windows), calls these, checks
the result against the version transition table (:func:`checked`) and commits it. Every
verdict states its evidence (:mod:`deepedge.controlplane.evidence`): ``n``, the
difference and its interval.

With ``S`` the serving version, ``P`` the one it replaced (scored in the shadow on the
same requests), ``C`` a canary or candidate, ``K`` a kept version, and the deployment's
confidence, minimum of samples ``m``, tolerance ``t`` and gain ``g`` (``gate``):

* **Rollback.** ``S`` against ``P`` on every sample since ``S`` began serving: rolled back
  once ``n >= m`` and the interval of ``acc_S - acc_P`` lies below 0.
* **Canary.** ``C`` against ``S`` on every labelled sample of its windows (each as it
  answered, or in the shadow): after ``canary.windows`` windows, rolled back once the
  interval lies below 0, promoted once it lies above ``-t``; until then it serves on
  (undecided, said); still undecided after ``canary.max_windows``, it is rolled back (no
  evidence it is as good: what serves stays). The loop counts every disagreement of the
  two on the window (:mod:`deepedge.controlplane.disagreement`). A drift that overtakes a
  canary no better on the drifted window rolls it back, and the drift's update starts in
  the same window (:func:`overtaken_by_drift`).
* **Gate.** ``C`` against what serves (or its parent) on the held-out split of its training
  windows (on the samples labelled since, when its parent no longer serves): passes when
  ``n >= m`` and the interval of ``acc_C - acc_S`` lies above ``g``; undecided with a
  difference above ``g``, its canary decides (:func:`on_probation`).
* **Trigger.** An operator's request; a drift: the serving version's accuracy interval
  lies below ``trigger.accuracy_threshold``, or below the level before the drift less
  ``trigger.recovery_margin`` (:func:`recovery.level_before`; so updates go on until the
  site is back where it was, as Ekya retrains every window; a threshold of 0 turns both
  off); a sample count; a schedule; a follow-up: the newest update was shown better than
  what it replaced and the site still serves below the level, or, in a drift's first
  windows, a drop's chain of updates goes on while each is estimated better
  (:func:`recovery.follow_up`: a recovery goes on while each update helps). An update not
  caused by a drift trains on the windows since the serving version's first
  (:func:`recovery.lineage_windows`: it goes on learning its condition from all of its
  samples). A trigger whose update would train on too few samples waits for them (said)
  instead of failing.
* **Kept versions.** Every window that tells, versions that served before (``RETIRED``) are
  scored on the window's samples (before any training on a drift); the best whose interval
  against ``S`` lies above 0 serves at once, without training (a recurring condition:
  night, rain, a moved camera), also while an update trains (it goes on, gated against what
  serves then) or a canary runs (it is rolled back: it learned what no longer comes).
* **Rollback, paused off its data.** The rollback watch adds no evidence from a window whose
  inputs are far from what ``S`` learned (:func:`data_distance`): on a new condition ``S``
  and ``P`` are both off their data, and a loss there says nothing of ``S`` on its own. ``P``
  is kept, so when it is the better one there it serves again as a kept version, and ``S``
  stays kept for when its condition returns, instead of being rolled back for good.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deepedge.controlplane.deployments import NewVersion, Step, VersionChange
from deepedge.controlplane.evidence import PairedComparison
from deepedge.controlplane.records import (
    DATA_SEVERITY,
    RECOVERY_UPDATE,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
    TriggerKind,
    WindowPoint,
)
from deepedge.controlplane.recovery import (
    MAX_DRIFT_WINDOWS,
    RECOVERY_TRIGGERS,
    drift_bar,
    drift_windows,
    drop_under_way,
    estimated_gain,
    follow_up,
    lineage_windows,
    overtaken_update,
    recovery_goes_on,
    update_trigger,
)
from deepedge.controlplane.recurring import (
    FAR_SEVERITY,
    data_distance,
    data_severity,
    looks_like_kept,
    restore,
    restore_pending,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.version_steps import (
    CANARY_SHARE,
    SHADOW,
    checked,
    empty_evidence,
    evidence_metrics,
    promote,
    roll_back,
    roll_back_canary,
    stored_evidence,
)
from deepedge.controlplane.window_edges import MAX_SHORT_WINDOWS, MOVED_WINDOW_SHARE, short_run
from deepedge.controlplane.window_facts import Policy, WindowFacts, pooled
from deepedge.learning.trigger import TriggerFacts, TriggerPolicy, decide_trigger

D, V = DeploymentStatus, VersionStatus
MAX_LAG_WINDOWS = 5  # a loop this far behind (e.g. after downtime) catches up in one window


# -- the gate -----------------------------------------------------------------------------


def gate(policy: Policy, deployment: DeploymentRecord, version: ModelVersion,
         comparison: PairedComparison | None, rival: int | None,
         changes: Sequence[VersionChange], events: Sequence[Event],
         canary_nodes: Sequence[str], skip_canary: bool = False) -> Step:  # fmt: skip
    """The gate's verdict on ``version`` against ``rival`` on held-out samples (module
    text), then its rollout (a canary, or serving at once)."""
    n, events = version.number, list(events)
    reject = {"status": D.ACTIVE, "current_job_id": None}
    detail = comparison.document() if comparison is not None else {"n": 0}
    if comparison is None or comparison.n < policy.min_samples:
        have = comparison.n if comparison is not None else 0
        return Step(deployment=reject, versions=(*changes, VersionChange(n, V.REJECTED)),
                    events=(*events, Event(EventKind.GATE_FAILED,
                            f"v{n} undecided at the gate: {have} held-out samples, fewer than "
                            f"the {policy.min_samples} a decision needs; rejected", version=n,
                            detail=detail)))  # fmt: skip
    versus = f"v{n} against v{rival}: {comparison.text()}"
    if comparison.low <= policy.min_gain and on_probation(policy, comparison, skip_canary):
        events.append(Event(EventKind.GATE_PASSED, f"{versus}: better on its held-out samples "
                            "but not yet shown so; its canary decides on live traffic",
                            version=n, detail={**detail, "probation": True}))  # fmt: skip
        return rollout(policy, deployment, n, changes, events, canary_nodes)
    if comparison.low <= policy.min_gain:
        return Step(deployment=reject, versions=(*changes, VersionChange(n, V.REJECTED)),
                    events=(*events, Event(EventKind.GATE_FAILED, f"{versus}; not better by "
                            f"more than {policy.min_gain:g}: rejected", version=n,
                            detail=detail)))  # fmt: skip
    events.append(Event(EventKind.GATE_PASSED, f"{versus}: passed", version=n, detail=detail))
    if at_once(policy, version) and not skip_canary:
        return promote(deployment, n, changes, events, "without a canary: a recovery's update "
                       "shown better at its gate")  # fmt: skip
    return rollout(policy, deployment, n, changes, events, canary_nodes, skip_canary)


def at_once(policy: Policy, version: ModelVersion) -> bool:
    """Whether a version its gate showed better serves at once: a recovery's update (an
    accuracy drop's or a follow-up's, :data:`RECOVERY_UPDATE`) unless
    ``canary.during_recovery``. The site serves below its level meanwhile, and a canary
    would hold each step of the recovery back a window; the rollback watch still guards
    it. One its gate leaves undecided still goes to a canary (:func:`on_probation`)."""
    return bool(version.metrics.get(RECOVERY_UPDATE)) and not policy.canary_during_recovery


def on_probation(policy: Policy, comparison: PairedComparison, skip_canary: bool) -> bool:
    """Whether a candidate the held-out samples leave undecided goes to a canary: it looks
    better (its difference above ``g``) and a canary will judge it. A few hundred held-out
    samples cannot show the point or two an update of the same condition adds; the
    canary's verdict reads every window after it, all its disagreements with what serves
    labelled (:mod:`deepedge.controlplane.disagreement`), rolls it back once it is shown
    worse and promotes it only once it is shown no worse than ``-t``."""
    return policy.canary_windows > 0 and not skip_canary and comparison.diff > policy.min_gain


def rollout(policy: Policy, deployment: DeploymentRecord, number: int,
            changes: Sequence[VersionChange], events: Sequence[Event],
            canary_nodes: Sequence[str], skip_canary: bool = False) -> Step:  # fmt: skip
    """A version that passed its gate: a canary on ``canary_nodes`` (alive ones), or
    serving at once."""
    if policy.canary_windows > 0 and not skip_canary:
        where = f" on {', '.join(canary_nodes)}" if canary_nodes else ""
        return Step(
            deployment={"status": D.CANARY, "canary_version": number, "canary_windows_done": 0,
                        "current_job_id": None},
            versions=(*changes,
                      VersionChange(number, V.CANARY, metrics=empty_evidence(CANARY_SHARE))),
            events=(*events, Event(EventKind.CANARY_STARTED,
                    f"v{number} serves a share of the traffic{where} until the evidence "
                    f"decides (at least {policy.canary_windows} window(s))", version=number,
                    detail={"nodes": list(canary_nodes)})),
        )  # fmt: skip
    return promote(deployment, number, changes, events, "without a canary")


# -- a window ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowVerdict:
    step: Step
    trigger: TriggerKind
    wants_kept: bool = False  # a drift with kept versions not yet scored: score, then ask again
    notes: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (kind, what)


def recent_windows(history: Sequence[WindowPoint], index: int, samples: int, at_least: int,
                   need: int) -> tuple[int, ...]:  # fmt: skip
    """The newest ``at_least`` windows, or more (up to ``MAX_DRIFT_WINDOWS``) until they hold
    ``need`` labelled samples: what an update not caused by a drift trains on."""
    start, held = index, samples
    for point in reversed(history[-(MAX_DRIFT_WINDOWS - 1) :]):
        if index - start + 1 >= at_least and held >= need:
            break
        start, held = point.window, held + point.samples
    return tuple(range(start, index + 1))


def window(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts,
           busy: bool) -> WindowVerdict:  # fmt: skip
    """The decisions of one window (module text): rollback, then the canary's verdict,
    then the trigger; the window's point and every event with its evidence."""
    serving = deployment.serving_version
    assert serving is not None
    statuses = {n: v.status for n, v in facts.versions.items()}
    changes: list[VersionChange] = []
    events: list[Event] = []
    notes: list[tuple[str, str]] = []
    accuracy = facts.served.value if facts.served is not None and facts.served.n else None
    fields: dict[str, Any] = {
        "window": facts.index,
        "next_window_at": next_due(facts.due_at, facts.now, facts.next_window_s or facts.window_s),
        "last_accuracy": accuracy,
        # every label an update learns from counts (the least sure answers' too): counting
        # the uniform ones alone, a sample count of 300 came after 19 windows of 30 labels
        "samples_since_update": deployment.samples_since_update + (facts.trainable
                                                                   or facts.samples),
    }
    overtaken = overtaken_by_drift(policy, deployment, facts)
    live = _rollback_and_canary(policy, deployment, facts, changes, events, fields, notes,
                                overtaken)  # fmt: skip
    status = fields.get("status", deployment.status)
    # one verdict a window; a canary a drift overtook leaves the window to the drift's update
    decided = "serving_version" in fields or ("canary_version" in fields and not overtaken)
    stale = overtaken_update(policy, deployment, facts) if not decided else None
    if stale is not None:  # ... and so does a routine update it overtook
        assert facts.served is not None
        bar, _ = drift_bar(policy, facts.history)
        changes.append(VersionChange(stale.number, V.CANCELLED))
        events.append(Event(EventKind.CANCELLED, f"v{stale.number} cancelled: a drift "
                            f"overtook its {_update_name(facts, deployment)} (served accuracy "
                            f"{facts.served.text()}, below {bar:.3f}): it learns what no "
                            "longer comes; its job halts and the drift's update starts now",
                            window=facts.index, version=stale.number, job_id=stale.job_id,
                            detail=facts.served.document()))  # fmt: skip
        fields.update(status=D.ACTIVE, current_job_id=None)
        status, busy = D.ACTIVE, False
        # its trigger's cooldown does not hold the drift's update back
        deployment = dataclasses.replace(deployment, last_update_window=None)
    trigger: TriggerKind = TriggerKind.NONE
    new_versions: tuple[NewVersion, ...] = ()
    wants_kept = False
    if status is D.ACTIVE and not busy and not live and not decided:
        trigger, new_versions, wants_kept = _trigger(policy, deployment, facts, fields,
                                                     changes, events, notes)  # fmt: skip
    elif not decided and status in (D.ACTIVE, D.UPDATING, D.CANARY):
        # an update trains or a canary runs: a condition that comes back is still served
        # by its kept version at once, not after the update's verdict
        wants_kept = restore(policy, deployment, facts, fields, changes, events) is None
    pending = (
        None
        if wants_kept or decided or "serving_version" in fields
        else (restore_pending(facts, serving))
    )
    if pending is not None:  # its evidence is read again after a short window
        fields["next_window_at"] = _short_next(facts)
        notes.append(("restore-pending", f"the inputs look like what kept v{pending[0]} "
                      f"learned; its evidence pools over short windows "
                      f"({pending[1].text()})"))  # fmt: skip
    if notes:
        kinds = "+".join(kind for kind, _ in notes)
        if kinds != facts.last_undecided:  # a streak of the same is said once
            events.append(Event(EventKind.UNDECIDED,
                                f"window {facts.index}: {'; '.join(t for _, t in notes)}",
                                window=facts.index, detail={"reason": kinds}))  # fmt: skip
    point = WindowPoint(
        window=facts.index, at=facts.now, due_at=facts.due_at, served_version=serving,
        accuracy=accuracy, canary_version=deployment.canary_version,
        canary_accuracy=facts.canary_accuracy, previous_version=deployment.previous_version,
        previous_accuracy=facts.previous_accuracy, samples=facts.samples, trigger=trigger,
        severity=facts.severity,
    )  # fmt: skip
    step = Step(deployment=fields, versions=tuple(changes), new_versions=new_versions,
                window=point, events=tuple(events))  # fmt: skip
    return WindowVerdict(checked(step, deployment, statuses), trigger, wants_kept, tuple(notes))


def _update_name(facts: WindowFacts, deployment: DeploymentRecord) -> str:
    """What the deployment's update under way is called in an event: by its trigger."""
    following = update_trigger(deployment, facts.history) is TriggerKind.FOLLOW_UP
    return "follow-up" if following else "routine update"


def _short_next(facts: WindowFacts) -> float:
    """When the next window is due when it is short (``MOVED_WINDOW_SHARE`` of
    ``window_s``): evidence or samples awaited are read seconds later."""
    return next_due(facts.due_at, facts.now, facts.window_s * MOVED_WINDOW_SHARE)


def overtaken_by_drift(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts) -> bool:
    """Whether a drift overtook the canary: this window's served accuracy lies below the
    drift's bar (even the interval's upper end, on at least ``m`` samples) while the canary
    does not look better than what serves on it. It learned a condition that no longer
    comes, and waiting for its verdict would hold the drift's update back for windows."""
    window = facts.canary_versus_serving
    if deployment.canary_version is None or facts.served is None or window is None:
        return False
    bar, _ = drift_bar(policy, facts.history)
    dropped = facts.served.n >= policy.min_samples and facts.served.high < bar
    return dropped and window.diff <= 0.0


def _rollback_and_canary(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts,
                         changes: list[VersionChange], events: list[Event],
                         fields: dict[str, Any], notes: list[tuple[str, str]],
                         overtaken: bool = False) -> bool:  # fmt: skip
    """The rollback and the canary's verdict into ``changes``/``events``/``fields``; True
    while a canary still serves after this window. ``overtaken``: a drift overtook the
    canary (:func:`overtaken_by_drift`), which is rolled back."""
    serving, previous, canary = (deployment.serving_version, deployment.previous_version,
                                 deployment.canary_version)  # fmt: skip
    assert serving is not None
    changes.append(VersionChange(serving, served_one_more_window=True))
    away = data_distance(facts.versions.get(serving), facts.severity)
    watched = previous is not None and facts.versus_previous is not None
    if watched and FAR_SEVERITY <= away < math.inf:
        notes.append(("rollback-paused", f"v{serving}'s rollback watch pauses: the inputs "
                      f"(drift severity {facts.severity:.2f}) are far from what it "
                      "learned"))  # fmt: skip
    elif watched:
        assert previous is not None and facts.versus_previous is not None
        total = stored_evidence(facts.versions.get(serving), SHADOW, policy.confidence)
        total = total + facts.versus_previous
        if total.n >= policy.min_samples and total.high < 0:
            step = roll_back(deployment, serving, previous,
                             f"served worse than v{previous} since it began serving "
                             f"({total.text()})", facts.index, total.document())  # fmt: skip
            changes.extend(step.versions)
            events.extend(step.events)
            fields.update(step.deployment)
            return False
        changes.append(VersionChange(serving, metrics=evidence_metrics(total, SHADOW)))
    if canary is None:
        return False
    done = deployment.canary_windows_done + 1
    fields["canary_windows_done"] = done
    before = stored_evidence(facts.versions.get(canary), CANARY_SHARE, policy.confidence)
    total = before + facts.canary_versus_serving if facts.canary_versus_serving else before
    metrics = evidence_metrics(total, CANARY_SHARE)
    if overtaken:
        assert facts.served is not None and facts.canary_versus_serving is not None
        overtook = roll_back_canary(
            deployment, f"a drift overtook it (served accuracy {facts.served.text()}; "
            f"the canary on this window {facts.canary_versus_serving.text()}): it learned "
            "what no longer comes, and the drift's update starts now", facts.index,
            facts.canary_versus_serving.document(), metrics)  # fmt: skip
        changes.extend(overtook.versions)
        events.extend(overtook.events)
        fields.update(overtook.deployment)
        return False
    if done < policy.canary_windows:
        changes.append(VersionChange(canary, metrics=metrics))
        return True
    enough = total.n >= policy.min_samples
    verdict: Step | None = None
    held = ""
    if enough and total.high < 0:
        verdict = roll_back_canary(deployment, f"worse than v{serving} on its share "
                                f"({total.text()})", facts.index, total.document(),
                                {**metrics, "canary_accuracy": total.a_accuracy})  # fmt: skip
    elif (enough and total.low > -policy.tolerance and done < policy.canary_max_windows
          and kept_first(facts, serving)):
        held = "; shown no worse, but the inputs look like a kept version's data: it first"
    elif enough and total.low > -policy.tolerance:
        verdict = promote(
            deployment,
            canary,
            [VersionChange(canary, metrics=metrics)],
            [],
            f"after its canary ({total.text()})",
            facts.index,
            total.document(),
        )
    elif done >= policy.canary_max_windows:  # no evidence it is as good: what serves stays
        verdict = roll_back_canary(deployment, f"undecided after {done} windows ("
                                   f"{total.text()}): what serves stays", facts.index,
                                   total.document(), metrics)  # fmt: skip
    if verdict is None:
        changes.append(VersionChange(canary, metrics=metrics))
        notes.append(("canary", f"canary v{canary} undecided ({total.text()}){held}"))
        return True
    changes.extend(verdict.versions)
    events.extend(verdict.events)
    fields.update(verdict.deployment)
    return False


def kept_first(facts: WindowFacts, serving: int) -> bool:
    """Whether a canary's promotion waits for a kept version: the window's inputs look like
    a kept version's data and not like the serving version's (:func:`looks_like_kept`), and
    that version is not yet scored on it, or looks no worse. A condition that comes back
    is served by the version that learned it; a canary trained on the condition that just
    ended would be promoted on a window of the returned one, and the kept version serve
    again only a window later."""
    alike = [n for n, v in facts.versions.items()
             if v.status is V.RETIRED and looks_like_kept(facts.versions, n, serving,
                                                          facts.severity)]  # fmt: skip
    if not alike:
        return False
    if facts.kept is None:
        return True
    return any(c.diff >= 0.0 for n, c in facts.kept if n in alike)


Triggered = tuple[TriggerKind, tuple[NewVersion, ...], bool]


def _trigger(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts,
             fields: dict[str, Any], changes: list[VersionChange], events: list[Event],
             notes: list[tuple[str, str]]) -> Triggered:  # fmt: skip
    served = pooled(facts.served, facts.history, deployment.serving_version, policy)
    # below the threshold, or below the level before the drift less the margin (a threshold
    # of 0 turns accuracy triggers off: updates then come on request, count or schedule)
    bar, level = drift_bar(policy, facts.history)
    told = served is not None and served.n >= policy.min_samples
    if not told and not deployment.update_requested:
        notes.append(("few-samples", f"{served.n if served else 0} labelled samples, fewer "
                      f"than the {policy.min_samples} that tell a drift"))  # fmt: skip
    # a drop only when even the interval's upper end is below the bar
    rule = TriggerPolicy(bar, policy.period_windows, policy.cooldown_windows, policy.sample_count)
    kind = decide_trigger(rule, TriggerFacts(
        facts.index, served.high if told and served is not None else None,
        deployment.last_update_window, int(fields["samples_since_update"]),
        bool(deployment.update_requested)))  # fmt: skip
    serving = deployment.serving_version
    assert serving is not None
    restored = restore(policy, deployment, facts, fields, changes, events)
    if restored is None:
        return TriggerKind.NONE, (), True
    if isinstance(restored, PairedComparison):
        fields.update(samples_since_update=0, update_requested=0)
        if kind is not TriggerKind.ACCURACY_DROP or restored.a_accuracy >= bar:
            fields["last_update_window"] = facts.index
            return TriggerKind.ACCURACY_DROP, (), False
        # a drift the kept version serves better, but still below the bar: it serves now,
        # and an update learns the drift from it at once
        serving = int(fields["serving_version"])
    why = ""
    # a routine update while a recovery helps is its follow-up (labelled, trained and told
    # as the recovery it is: the samples a recovery labels count up to a routine trigger);
    # until it may come, the recovery's version serves (a routine update on the windows
    # before the drift too, as it was promoted, lost to it)
    routine = (TriggerKind.NONE, TriggerKind.SAMPLE_COUNT, TriggerKind.SCHEDULE)
    if kind in routine and follow_up(policy, deployment, facts, level):
        replaced = facts.versions[serving].replaced
        kind = TriggerKind.FOLLOW_UP
        gain = estimated_gain(policy, facts.versions[serving])
        why = (f"; v{serving} served better than v{replaced}"
               f"{f' by {gain:+.3f}' if gain is not None else ''}, and the recovery goes on")
    elif kind in routine and recovery_goes_on(policy, deployment, facts.versions,
                                              facts.history, level):  # fmt: skip
        kind = TriggerKind.NONE
    if kind is TriggerKind.NONE:
        return kind, (), False
    need = policy.samples_to_train()
    data = drift_windows(facts.history, facts.index, bar)
    if kind is not TriggerKind.ACCURACY_DROP:  # the drift's windows, the newest ones, or
        lineage = lineage_windows(facts.versions.get(serving), facts.index, facts.severity)
        # (its condition's; a drift's follow-up learns the drift only, not the newest windows
        # before it: on the benchmark they were five of its eight, and its version's data
        # looked like neither condition, its rollback watch paused on the drift's inputs)
        chain = kind is TriggerKind.FOLLOW_UP and drop_under_way(deployment, facts.history)
        recent = () if chain else recent_windows(facts.history, facts.index, facts.samples,
                                                 policy.recent_windows, need)  # fmt: skip
        data = max(data, recent, lineage, key=len)
    # (earlier windows count the uniform labels, the least sure answers' labels train too:
    # estimated; this window's are counted, so the drift's first update, on its first
    # window alone, is not started on fewer labels than its gate needs held out)
    earlier = sum(w.samples for w in facts.history if w.window in data)
    this = facts.trainable or facts.samples / (1.0 - policy.hard_share)
    trainable = round(earlier / (1.0 - policy.hard_share) + this)
    if trainable < need:
        # a drift's update waiting for its samples reads them after a short window, not a
        # whole one (the drift's first window, cut short where its inputs moved, held 62 of
        # the 80 needed: its update came a window and a half after the drift)
        soon = (kind in RECOVERY_TRIGGERS
                and short_run(facts.history, facts.due_at, facts.window_s) < MAX_SHORT_WINDOWS)
        if soon:
            fields["next_window_at"] = _short_next(facts)
        notes.append(("waits-for-samples", f"the {kind.value} update waits for samples: "
                      f"{trainable} labelled in windows {data[0]}-{data[-1]}, {need} "
                      f"needed{'; the next window is short' if soon else ''}"))  # fmt: skip
        return TriggerKind.NONE, (), False
    number = max(facts.versions) + 1
    fields.update(status=D.UPDATING, last_update_window=facts.index, samples_since_update=0,
                  update_requested=0)  # fmt: skip
    what = f"served accuracy {served.text()}" if served is not None else "no labelled sample"
    level_text = f", level before the drift {level:.3f}" if level is not None else ""
    events.append(Event(EventKind.TRIGGER, f"window {facts.index}: {kind.value} ({what}"
                        f"{level_text}{why}); training v{number} from v{serving} on windows "
                        f"{data[0]}-{data[-1]}", window=facts.index, version=number,
                        detail={"trigger": kind.value, "window_due_at": facts.due_at,
                                "accuracy": served.value if served else None,
                                "served": served.document() if served else None,
                                "level": level, "bar": bar}))  # fmt: skip
    described = {DATA_SEVERITY: data_severity(facts.history, data, facts.severity)}
    if kind in RECOVERY_TRIGGERS:
        described[RECOVERY_UPDATE] = 1.0
    return kind, (NewVersion(number, serving, data, f"update on {kind.value}",
                             metrics=described),), False  # fmt: skip


def catch_up_end(due: float, now: float, window_s: float) -> float:
    """Where the window due at ``due`` ends: at ``due``, or, for a loop more than
    ``MAX_LAG_WINDOWS`` behind (a restart after downtime), at ``now``: one longer window
    holds every request since, none is left between windows."""
    return now if now - due > MAX_LAG_WINDOWS * window_s else due


def next_due(due: float, now: float, window_s: float) -> float:
    """The next window's due time: a window after this one's end (``due``: its end)."""
    return max(due, catch_up_end(due, now, window_s)) + window_s
