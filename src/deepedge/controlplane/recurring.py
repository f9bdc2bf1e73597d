"""Recurring conditions: a kept version serves again as soon as the evidence shows it fits.

Every version that served keeps a description of the data it learned from (the mean drift
severity of its training windows, :data:`~deepedge.controlplane.records.DATA_SEVERITY`).
When a window's inputs look like a kept version's data (:func:`looks_like_kept`) and not
like the serving version's, the kept version is scored on the window (inference only) with
a census of the requests the two answer apart (:mod:`deepedge.controlplane.disagreement`),
pooled over the consecutive windows that look like it (:func:`pooled_kept`), and serves
again once that evidence shows it no worse (:func:`best_kept`). Until then the windows
stay short (:func:`restore_pending`), so a camera's night, rain or moved view gets its
model back seconds after it returns, not a window or two later. A kept version clearly
better than the serving one serves again whatever the description says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from deepedge.controlplane.deployments import VersionChange
from deepedge.controlplane.evidence import PairedComparison, paired_from_counts
from deepedge.controlplane.records import (
    DATA_SEVERITY,
    DeploymentRecord,
    Event,
    EventKind,
    ModelVersion,
    WindowPoint,
)
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.version_steps import (
    KEPT_AGAINST,
    KEPT_SHARE,
    KEPT_WINDOW,
    evidence_metrics,
    promote,
    stored_evidence,
)
from deepedge.controlplane.window_edges import MAX_SHORT_WINDOWS, short_run
from deepedge.controlplane.window_facts import Policy, WindowFacts, pooled

D, V = DeploymentStatus, VersionStatus


def restore(policy: Policy, deployment: DeploymentRecord, facts: WindowFacts,
            fields: dict[str, Any], changes: list[VersionChange],
            events: list[Event]) -> PairedComparison | bool | None:  # fmt: skip
    """A recurring condition: every window that tells, the kept versions are scored on it
    (inference only) and the best serves again (:func:`best_kept`). ``None``: they are
    not scored yet (score them, then ask again); its evidence when one serves again (into
    ``fields``, ``changes`` and ``events``); False when none does. An update under way goes
    on (gated against what serves then); a canary is rolled back (it learned what no
    longer comes)."""
    served = pooled(facts.served, facts.history, deployment.serving_version, policy)
    told = served is not None and served.n >= policy.min_samples
    kept = [v for v in facts.versions.values() if v.status is V.RETIRED]
    if kept and told and facts.kept is None:
        return None
    serving = deployment.serving_version
    assert serving is not None
    kept_now = pooled_kept(facts, serving, changes)
    restored = best_kept(policy, kept_now, facts.versions, serving, facts.severity)
    if restored is None:
        return False
    number, comparison = restored
    learned = facts.versions[number].metrics.get(DATA_SEVERITY)
    # what this window decided so far counts: a canary it rolled back is not rolled back again
    canary = fields.get("canary_version", deployment.canary_version)
    ahead = facts.canary_versus_serving
    if canary is not None and ahead is not None and ahead.diff >= comparison.diff:
        # the canary gains at least as much on this window over what serves: its verdict
        # decides (a drift's canary was rolled back for a kept version its drift severity
        # matched, +0.02 over the serving version where the canary gained +0.17)
        return False
    cancel, said = [], []
    if canary is not None:
        cancel.append(VersionChange(canary, V.ROLLED_BACK))
        said.append(Event(EventKind.ROLLED_BACK, f"canary v{canary} rolled back: kept "
                          f"v{number} serves again ({comparison.text()})", window=facts.index,
                          version=canary, detail={"to_version": number}))  # fmt: skip
    step = promote(deployment, number, cancel, said, f"again: the inputs look like what it "
                   f"served before ({comparison.text()})", facts.index,
                   {**comparison.document(), "restored": True,
                    "window_severity": facts.severity, "data_severity": learned})  # fmt: skip
    moved = dict(step.deployment)
    if fields.get("status", deployment.status) is D.UPDATING:  # its job goes on (updating)
        del moved["status"], moved["current_job_id"]
    fields.update(moved)
    changes.extend(step.versions)
    events.extend(step.events)
    return comparison


Kept = tuple[tuple[int, PairedComparison], ...]


def pooled_kept(facts: WindowFacts, serving: int, changes: list[VersionChange]) -> Kept:
    """Each kept version's comparison, a version the window looks like
    (:func:`looks_like_kept`) with its evidence of the windows just before that did too,
    against the same serving version: a condition that came back is told over its first
    windows together, not each alone (a non-inferiority margin of 2 points needs a few
    hundred requests). The pooled table is kept in the version's metrics (``kept_*``)."""
    pooled: list[tuple[int, PairedComparison]] = []
    for n, comparison in facts.kept or ():
        version = facts.versions.get(n)
        if version is None or not looks_like_kept(facts.versions, n, serving, facts.severity):
            pooled.append((n, comparison))
            continue
        metrics = version.metrics
        run_on = (metrics.get(KEPT_AGAINST) == serving
                  and metrics.get(KEPT_WINDOW) == facts.index - 1)  # fmt: skip
        total = comparison
        if run_on:
            total = stored_evidence(version, KEPT_SHARE, comparison.confidence) + comparison
        changes.append(VersionChange(n, metrics={**evidence_metrics(total, KEPT_SHARE),
                                                 KEPT_AGAINST: float(serving),
                                                 KEPT_WINDOW: float(facts.index)}))  # fmt: skip
        pooled.append((n, total))
    return tuple(pooled)


def data_severity(history: Sequence[WindowPoint], data: Sequence[int], current: float) -> float:
    """What a version's training data looked like: the mean drift severity of its data
    windows (the current window's ``current`` for those not yet in ``history``)."""
    seen = {w.window: w.severity for w in history}
    return sum(seen.get(w, current) for w in data) / len(data) if data else current


def data_distance(version: ModelVersion | None, severity: float) -> float:
    """How far a window of drift severity ``severity`` is from what ``version``'s training
    data looked like (its :data:`DATA_SEVERITY`); infinite when that is not described (an
    upload)."""
    described = version.metrics.get(DATA_SEVERITY) if version is not None else None
    return math.inf if described is None else abs(described - severity)


NEAR_SEVERITY = 0.15  # a window whose drift severity is this near a version's data's looks
# like it (the severity's noise between windows of one condition: up to 0.13 on the digits)
FAR_SEVERITY = 0.25  # and one this far from it does not


def looks_like_kept(versions: Mapping[int, ModelVersion], kept: int, serving: int,
                    severity: float) -> bool:  # fmt: skip
    """Whether a window of drift severity ``severity`` looks like kept version ``kept``'s
    data (within :data:`NEAR_SEVERITY` of it) and not like the serving version's
    (:data:`FAR_SEVERITY` or more from it, which must be described): what the
    descriptions say before any label does (:func:`best_kept`)."""
    away = data_distance(versions.get(serving), severity)
    return FAR_SEVERITY <= away < math.inf and data_distance(
        versions.get(kept), severity) <= NEAR_SEVERITY  # fmt: skip


def best_kept(
    policy: Policy, kept: Sequence[tuple[int, PairedComparison]],
    versions: Mapping[int, ModelVersion], serving: int, severity: float,
) -> tuple[int, PairedComparison] | None:  # fmt: skip
    """The kept version to serve again, if any: the best whose accuracy beats the serving
    one's with the interval above 0 (one the window looks like first: on the returned
    first scene, a version of the gradual drift's ramp beat the serving one by +0.092 on
    120 requests and served the scene at 0.96 where the first scene's own version, also
    better, served 0.99); else, when the window looks like a kept version's
    data (severity within :data:`NEAR_SEVERITY` of its description) and not like the
    serving version's (:data:`FAR_SEVERITY` or more away), the best such (on the census's
    difference) whose interval shows it no worse than the rollback tolerance and not behind
    (a non-inferiority test, on a census's evidence in practice: the uniform labels alone
    are too few to clear it): the serving version never learned these inputs, the kept
    one did.

    The first test's intervals come at the confidence shared by every kept version scored
    (Bonferroni, :func:`~deepedge.controlplane.window_scores.score_kept`). The second
    tests only the versions the window's inputs look like, chosen before any label is
    read, so its intervals share the confidence among those alone (usually one): a
    restore puts back a version worse than the serving one by more than the tolerance
    with a chance of at most ``1 - confidence`` either way."""
    enough = [(n, c) for n, c in kept if c.n >= policy.min_samples]
    better = [(n, c) for n, c in enough if c.low > 0]
    if better:  # the window looks like its data: chosen before any label, it goes first
        alike_better = [(n, c) for n, c in better
                        if looks_like_kept(versions, n, serving, severity)]  # fmt: skip
        return max(alike_better or better, key=lambda item: (item[1].diff, item[1].low))

    def away(n: int) -> float:
        return data_distance(versions.get(n), severity)

    alike = [(n, c) for n, c in enough if looks_like_kept(versions, n, serving, severity)]
    each = 1.0 - (1.0 - policy.confidence) / max(len(alike), 1)
    fits = [(n, c) for n, c in ((n, _at(c, each)) for n, c in alike)
            if c.diff >= 0.0 and c.low > -policy.tolerance]  # fmt: skip

    def best(item: tuple[int, PairedComparison]) -> tuple[float, float, float]:
        return item[1].diff, item[1].low, -away(item[0])

    return max(fits, key=best) if fits else None  # all look like the window: the census's best


def _at(comparison: PairedComparison, confidence: float) -> PairedComparison:
    """The same table, its interval at ``confidence``."""
    c = comparison
    return paired_from_counts(c.both, c.a_only, c.b_only, c.neither, confidence)


def restore_pending(facts: WindowFacts, serving: int) -> tuple[int, PairedComparison] | None:
    """A kept version, with this window's comparison, the window looks like
    (:func:`looks_like_kept`) and that this window has not shown worse (its interval
    reaches above 0), when it did not serve again yet (the evidence pools over the next
    windows, :func:`pooled_kept`), and fewer than :data:`MAX_SHORT_WINDOWS` short windows
    came in a row: the next window is short too, so its evidence is read seconds later, not
    a whole window later. None otherwise.

    Not shown worse, rather than ahead on its point estimate: the descriptions chose the
    version before any label was read, and the first window of a condition that came back
    tells little (the kept version that served the digits' first scene at 0.97 and the
    drift's version at 0.95 answered 12 of 121 requests apart, 5 to 6 against the kept
    one; over the next 300 requests it was 18 to 1 its way)."""
    alike = [(n, c) for n, c in facts.kept or ()
             if c.high > 0.0 and looks_like_kept(facts.versions, n, serving, facts.severity)]
    if not alike or short_run(facts.history, facts.due_at, facts.window_s) >= MAX_SHORT_WINDOWS:
        return None
    return max(alike, key=lambda item: item[1].diff)
