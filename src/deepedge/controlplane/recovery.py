"""A drift's recovery, as pure functions of the deployment's windows: the level the site
served before the drift (:func:`level_before`) and the bar below which it has drifted
(:func:`drift_bar`), the windows since the drift began (:func:`drift_windows`), whether the
site still recovers and so labels at the recovery share (:func:`recovery_under_way`),
whether an update that helped is followed by another (:func:`follow_up`), and the windows
an update of a condition learns (:func:`lineage_windows`), and the routine update a drift
overtakes (:func:`overtaken_update`).

A recovery goes on while each update helps, as Ekya retrains every window: the version a
drop's update made, shown better than the one it replaced, is followed up until the site is
back at its level, and its windows are labelled at the recovery share until then. In the
drift's first ``RECOVERY_WINDOWS`` windows it goes on past that level while each update is
estimated better than its parent (:func:`helped`: the point estimate, where the level
before the drift is only what the old condition allowed, and a model learning a new one
still gains a point or two a window that no window's evidence can show). The first update
not estimated better ends it, so a condition the model cannot learn further costs one
update, not one a window.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence

from deepedge.controlplane.deployment_spec import UpdatePolicy
from deepedge.controlplane.evidence import wilson
from deepedge.controlplane.records import (
    GATE_ACCURACY,
    GATE_DIFF_LOW,
    PARENT_GATE_ACCURACY,
    DeploymentRecord,
    ModelVersion,
    TriggerKind,
    WindowPoint,
)
from deepedge.controlplane.recurring import FAR_SEVERITY, data_distance
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.version_steps import CANARY_SHARE, stored_evidence
from deepedge.controlplane.window_facts import Policy, WindowFacts, pooled

LEVEL_HORIZON_WINDOWS = 48  # how far back the level before a drift is looked for
LEVEL_SPAN_WINDOWS = 6  # windows pooled into one reading of the level
MAX_DRIFT_WINDOWS = 24  # an update trains on at most this many windows since the drift
DRIFT_END_WINDOWS = 2  # windows in a row back at the level that end a drift's run
# windows from a drift's drop in which a chain of updates that help goes on past the level
# before the drift (the label budget bounds it: two drifts at the recovery share for this
# many windows each, the rest at the routine share, label about a fifth of the requests)
RECOVERY_WINDOWS = 12


def level_before(history: Sequence[WindowPoint], min_samples: int) -> float | None:
    """The served accuracy the site had before a drift: the best pooled accuracy of
    ``LEVEL_SPAN_WINDOWS`` consecutive windows of the last ``LEVEL_HORIZON_WINDOWS``
    holding at least ``min_samples`` labelled samples, each reading less one standard error
    (None: no such reading). The best of many noisy readings reads high: on a few dozen
    labels a window, three windows of a version serving 0.97 read 1.000 by luck, and a bar
    the site can never reach keeps a drift's run (and its training data) going forever."""
    recent = [w for w in history[-LEVEL_HORIZON_WINDOWS:] if w.accuracy is not None]
    best: float | None = None
    for i in range(len(recent) - LEVEL_SPAN_WINDOWS + 1):
        run = recent[i : i + LEVEL_SPAN_WINDOWS]
        n = sum(w.samples for w in run)
        if n >= min_samples:
            level = sum((w.accuracy or 0.0) * w.samples for w in run) / n
            level -= math.sqrt(max(level * (1.0 - level), 0.25 / n) / n)
            best = level if best is None else max(best, level)
    return best


def drift_windows(history: Sequence[WindowPoint], index: int, bar: float | None) -> tuple[int, ...]:
    """The windows since the drift began: the current run of windows served below ``bar``
    (the level less the margin, or the threshold), this one included, at most
    ``MAX_DRIFT_WINDOWS``; a run is ended only by ``DRIFT_END_WINDOWS`` windows in a row at
    or above the bar (one window's estimate, on a few dozen labels, is noisy)."""
    start, above = index, 0
    for point in reversed(history[-(MAX_DRIFT_WINDOWS - 1) :]):
        if bar is None:
            break
        if point.accuracy is None or point.accuracy >= bar:
            above += 1
            if above >= DRIFT_END_WINDOWS:
                break
            continue
        above, start = 0, point.window
    return tuple(range(start, index + 1))


def drift_bar(policy: Policy, history: Sequence[WindowPoint]) -> tuple[float, float | None]:
    """The accuracy below which the serving version has drifted: the trigger's threshold,
    or the level before the drift less the margin (:func:`level_before`), and that level."""
    level = level_before(history, policy.min_samples)
    bar = policy.threshold
    if level is not None and policy.threshold > 0:
        bar = max(policy.threshold, level - policy.recovery_margin)
    return bar, level


RECOVERY_TRIGGERS = (TriggerKind.ACCURACY_DROP, TriggerKind.FOLLOW_UP)
ROUTINE_TRIGGERS = (TriggerKind.SAMPLE_COUNT, TriggerKind.SCHEDULE)


def update_trigger(deployment: DeploymentRecord,
                   history: Sequence[WindowPoint]) -> TriggerKind | None:  # fmt: skip
    """What started the deployment's newest update: the trigger of the window it started
    in (None: no update, or that window is no longer in ``history``)."""
    started = deployment.last_update_window
    return next((w.trigger for w in history if w.window == started), None)


def drop_under_way(deployment: DeploymentRecord, history: Sequence[WindowPoint]) -> bool:
    """Whether the deployment's newest update was started by an accuracy drop or follows
    one that helped (its window's trigger): while it, or its canary, is under way the site
    recovers and labels more."""
    return update_trigger(deployment, history) in RECOVERY_TRIGGERS


RECOVERY_EVIDENCE = 100  # uniform labels of a recovery's newest version that show it back
MIN_TOLD_SAMPLES = 10  # uniform labels of a window that show it below the drift's bar


def recovery_under_way(policy: Policy, deployment: DeploymentRecord,
                       versions: Mapping[int, ModelVersion],
                       history: Sequence[WindowPoint]) -> bool:  # fmt: skip
    """Whether the site still recovers from a drift, so a window is labelled at the
    recovery share:

    - the last window showed the serving version below the drift's bar (even its interval's
      upper end), whatever an update does: a drift's update rejected leaves the next one
      to learn from the drift's windows;
    - or a drop's or a follow-up's update or canary is under way (:func:`drop_under_way`);
    - or the version such an update made serves, is the newest, was shown better than what
      it replaced, and has not yet shown the site back at its level before the drift (its
      windows since it serves hold fewer than ``RECOVERY_EVIDENCE`` labels, or score below
      the level). Its follow-up then learns the windows since at the recovery share: at the
      routine share (about 23 uniform labels a window), a follow-up five windows on learned
      little more than its parent, was not shown better at the gate, and the recovery ended
      with the site serving 0.93 against a level of 0.96."""
    bar, level = drift_bar(policy, history)
    last = history[-1] if history else None
    if last is not None and last.accuracy is not None and last.samples >= MIN_TOLD_SAMPLES:
        _, high = wilson(round(last.accuracy * last.samples), last.samples, policy.confidence)
        if high < bar:
            return True
    busy = deployment.status in (DeploymentStatus.UPDATING, DeploymentStatus.CANARY)
    return (busy and drop_under_way(deployment, history)) or recovery_goes_on(
        policy, deployment, versions, history, level)


def newest_serving(deployment: DeploymentRecord,
                   versions: Mapping[int, ModelVersion]) -> ModelVersion | None:  # fmt: skip
    """The serving version when it is an update (it has a parent) and nothing newer was
    made since; None otherwise."""
    serving = deployment.serving_version
    version = versions.get(serving) if serving is not None else None
    if version is None or version.parent is None or serving != max(versions):
        return None
    return version


MAX_CHAIN_REJECTIONS = 2  # updates in a row rejected at their gates that a young chain
# goes on past


def chain_head(deployment: DeploymentRecord,
               versions: Mapping[int, ModelVersion]) -> ModelVersion | None:  # fmt: skip
    """The serving version when it is an update and every version made since was rejected
    at its gate, at most :data:`MAX_CHAIN_REJECTIONS` of them (none: the newest); None
    otherwise. A drift's young chain goes on from it (:func:`follow_up`): late in a
    recovery a model gains a point or so a window, which a gate's hundred held-out samples
    cannot show, and a rejection on them ended the chain after nine of its twelve windows
    (an offline chain with no gate, every update serving, came within half a point of the
    reference; stopped after ten windows, within 1.0-1.3). A canary rolled back (worse on
    live traffic) or a failed update ends it."""
    serving = deployment.serving_version
    version = versions.get(serving) if serving is not None else None
    if version is None or version.parent is None:
        return None
    since = [v for n, v in versions.items() if n > version.number]
    if len(since) > MAX_CHAIN_REJECTIONS or any(v.status is not VersionStatus.REJECTED
                                                 for v in since):  # fmt: skip
        return None
    return version


def recovery_goes_on(policy: Policy, deployment: DeploymentRecord,
                     versions: Mapping[int, ModelVersion], history: Sequence[WindowPoint],
                     level: float | None) -> bool:  # fmt: skip
    """Whether the version a drop's or a follow-up's update made serves, is the newest, was
    shown better than what it replaced, and has not yet shown the site back at ``level``
    (the level before the drift, :func:`drift_bar`): its windows since it serves hold fewer
    than ``RECOVERY_EVIDENCE`` labels, or score below the level. A follow-up comes next
    (:func:`follow_up`), not a routine update."""
    if not drop_under_way(deployment, history):
        return False
    index = history[-1].window + 1 if history else 0
    head = chain_head(deployment, versions)
    if head is not None and young(history, index) and helped(policy, head):
        return True
    version = newest_serving(deployment, versions)
    if version is None or level is None or not shown_better(policy, version):
        return False
    n, right = 0, 0.0
    for point in reversed(history):
        if point.served_version != version.number or point.accuracy is None:
            break
        n, right = n + point.samples, right + point.accuracy * point.samples
    return n < RECOVERY_EVIDENCE or right / n < level


def young(history: Sequence[WindowPoint], index: int) -> bool:
    """Whether window ``index`` is within ``RECOVERY_WINDOWS`` of the newest drop's."""
    drops = [w.window for w in history if w.trigger is TriggerKind.ACCURACY_DROP]
    return bool(drops) and index - max(drops) < RECOVERY_WINDOWS


def estimated_gain(policy: Policy, version: ModelVersion) -> float | None:
    """``version``'s accuracy less the version it replaced, point estimate: on its canary's
    live requests once they are ``m``, else on its gate's held-out samples (None:
    neither)."""
    canary = stored_evidence(version, CANARY_SHARE, policy.confidence)
    if canary.n >= policy.min_samples:
        return canary.diff
    gate = version.metrics.get(GATE_ACCURACY)
    parent = version.metrics.get(PARENT_GATE_ACCURACY)
    return None if gate is None or parent is None else gate - parent


def helped(policy: Policy, version: ModelVersion) -> bool:
    """Whether ``version`` was shown better than what it replaced, or estimated better
    (:func:`estimated_gain` above 0)."""
    if shown_better(policy, version):
        return True
    gain = estimated_gain(policy, version)
    return gain is not None and gain > 0.0


def shown_better(policy: Policy, version: ModelVersion) -> bool:
    """Whether ``version`` was shown better than the version it replaced: its gate's
    interval, or its canary's, lies above 0."""
    if version.metrics.get(GATE_DIFF_LOW, -math.inf) > 0.0:
        return True
    canary = stored_evidence(version, CANARY_SHARE, policy.confidence)
    return canary.n >= policy.min_samples and canary.low > 0.0


def follow_up(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts,
              level: float | None) -> bool:  # fmt: skip
    """Whether another update follows the serving one, and either

    - a drop or a follow-up started it, it was estimated better (:func:`helped`), the
      drop was less than ``RECOVERY_WINDOWS`` ago (:func:`young`), and what was made since
      was rejected at most :data:`MAX_CHAIN_REJECTIONS` times (:func:`chain_head`): at the
      first window's end after it serves, within the trigger's cooldown too; or
    - it is the newest, has served a window outside the cooldown, was shown better than
      what it replaced (:func:`shown_better`), and the site still serves below the level
      before the drift (its accuracy over the windows it served, at most
      ``MAX_POOLED_WINDOWS``).

    A recovery goes on while each update helps, as Ekya retrains every window, instead of
    waiting for the uniform labels to show a shortfall of a few points, which they cannot:
    on a window's 22 labels the interval of 0.93 reaches 0.99. Nor does a drift's young
    chain wait out the cooldown: each update learns the window's labels that came since its
    parent's began (150 in a recovery), and waiting a window more left the site served by
    a version two windows behind its labels, an update every other window. It stops at the
    first update not estimated better once the drift is no longer young, at a canary
    rolled back, or after rejections in a row."""
    head = chain_head(deployment, facts.versions)
    if (head is not None and drop_under_way(deployment, facts.history)
            and young(facts.history, facts.index) and helped(policy, head)):  # fmt: skip
        return True
    version = newest_serving(deployment, facts.versions)
    if version is None:
        return False
    last = deployment.last_update_window
    cooling = last is not None and facts.index - last <= policy.cooldown_windows
    if version.windows_served < 1 or cooling:
        return False
    served = pooled(facts.served, facts.history, version.number, policy, at_least=sys.maxsize)
    if served is None or not served.n:
        return False
    return level is not None and served.value < level and shown_better(policy, version)


def lineage_windows(version: ModelVersion | None, index: int, severity: float) -> tuple[int, ...]:
    """The windows from ``version``'s first training window to ``index``, at most
    ``MAX_DRIFT_WINDOWS``, when it learned inputs like this window's (its data's drift
    severity nearer than ``FAR_SEVERITY``) and recently (its newest window among those):
    an update of a condition learns from all its samples so far, not the newest few (an
    update on eight windows after a drift's twelve learned less than the version it would
    replace). Just ``index`` otherwise."""
    if version is None or not version.data_windows:
        return (index,)
    if data_distance(version, severity) >= FAR_SEVERITY:
        return (index,)
    start = max(min(version.data_windows), index - MAX_DRIFT_WINDOWS + 1)
    if max(version.data_windows) < start:
        return (index,)
    return tuple(range(start, index + 1))


def overtaken_update(policy: Policy, deployment: DeploymentRecord,
                     facts: WindowFacts) -> ModelVersion | None:  # fmt: skip
    """The update a drift overtook (None: none): the deployment's own update job, started
    by a sample count or a schedule, or a follow-up started before the drift's run of
    windows below the bar began (:func:`drift_windows`), still trains while this window
    shows the serving version below the drift's bar (even its interval's upper end, on at
    least ``m`` uniform labels). It learns the windows before the drift, so what it would
    serve no longer comes; waiting for it would hold the drift's update back for as long as
    it trains (a ResNet-18's routine update on this 2-core machine trained for 274 s, 55
    windows, while the site served a drift at 0.4; on the digits, a follow-up of the first
    scene started where the drift's first window ended early held the drift's update back a
    window). A drift's own follow-ups, started within its run, go on. An edge server's
    window retrains other deployments too, and an operator's request is kept: neither is
    overtaken."""
    if (deployment.status is not DeploymentStatus.UPDATING or facts.served is None
            or deployment.spec.update.policy is UpdatePolicy.EKYA_WINDOW):  # fmt: skip
        return None
    training = [v for v in facts.versions.values()
                if v.status is VersionStatus.TRAINING and v.parent is not None]  # fmt: skip
    started = deployment.last_update_window
    trigger = update_trigger(deployment, facts.history)
    if len(training) != 1 or started is None or trigger is None:
        return None
    bar, _ = drift_bar(policy, facts.history)
    if not (facts.served.n >= policy.min_samples and facts.served.high < bar):
        return None
    before = started < drift_windows(facts.history, facts.index, bar)[0]
    if trigger in ROUTINE_TRIGGERS or (trigger is TriggerKind.FOLLOW_UP and before):
        return training[0]
    return None
