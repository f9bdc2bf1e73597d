"""Where two versions disagree: the only requests that can tell them apart.

Two versions that give a request the same answer are both right or both wrong on it, so
their accuracies differ only on the requests where their answers differ. A version kept
from a recurring condition and the one that learned the drift between are often a few
points apart: on a window's 30 uniform labels that is one or two disagreements, which no
test can read. Yet the disagreements are known without a label, by running both versions
on the window's sampled inputs (inference only, milliseconds).

**The census.** For the kept versions asked about, every sampled input of the serving
version's share is answered by each of them; the requests where a kept version's answer
differs from the one served are golden-labelled (``golden-discordant``) when all of them,
over the versions asked about, number at most :data:`CENSUS_CAP` still unlabelled (a
version whose disagreements would overrun the cap is left to the uniform labels: so many
disagreements are seen in them anyway). Every disagreement of a counted version is then
labelled, so its paired table covers the whole share: ``f`` (only the kept version right),
``g`` (only the served answer right) and the disagreements both got wrong are counted, not
sampled; the agreements are split into both right and both wrong in the proportion the
uniform labels show (that split moves neither the difference nor McNemar's test, only the
interval's width).

Which versions are asked about is :func:`needs_census`: those the uniform labels leave
undecided while they look at least as good, or any undecided one when the window's inputs
moved (a condition that comes back changes what the cameras see before it changes
accuracy) or look like its data and not the serving version's
(:func:`~deepedge.controlplane.recurring.looks_like_kept`: only its census can show it no
worse). Decisions then read :func:`with_census`'s tables, at the same confidence.

**The canary's census** (:func:`take_canary_census`) is the same count for a canary against
the serving version, over every sampled request of the window (both shares, each version
as it answered or in the shadow). A canary of the same condition is most often a point or
two from what serves: its verdict on a window's 20-odd uniform labels took many windows,
while the census reads it over the whole window for a few labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from deepedge.controlplane.evidence import PairedComparison, paired_from_counts
from deepedge.controlplane.window_scores import Predict, answers_of
from deepedge.core.errors import TenantCodeError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import GOLDEN_DISCORDANT, SampleStore, StoredSample

if TYPE_CHECKING:
    from deepedge.controlplane.records import DeploymentRecord
    from deepedge.controlplane.site import TrafficWindow

CENSUS_CAP = 40  # golden labels a window's census may add (about 13 % of 300 requests)
MOVED_SEVERITY = 0.25  # a change of the inputs' drift severity between windows that says
# the condition changed (its noise between windows of one condition reaches 0.13)


class Labelling(Protocol):
    """What a census reads and writes: the site's sample store and its golden labeller
    (:class:`~deepedge.controlplane.site.Site`)."""

    samples: SampleStore

    def golden_labels(
        self, deployment: DeploymentRecord, images: np.ndarray
    ) -> np.ndarray | None: ...


@dataclass(frozen=True)
class Census:
    """Version ``version`` against the served answers on every sample of the serving
    share (a canary's: against the serving version on the whole window): ``agree`` same
    answer, and of the disagreements (all labelled) ``kept_only`` right only for
    ``version``, ``served_only`` only for the other, ``both_wrong`` for neither."""

    version: int
    agree: int
    kept_only: int
    served_only: int
    both_wrong: int


def needs_census(comparison: PairedComparison, moved: bool) -> bool:
    """Whether the uniform labels leave the kept version undecided (neither better nor
    worse with the interval clear of 0) while it looks at least as good, or the inputs
    moved."""
    undecided = comparison.low <= 0.0 <= comparison.high
    return undecided and (comparison.diff > 0.0 or moved)


def inputs_moved(severity: float, previous: float | None) -> bool:
    """Whether the window's drift severity moved from the window before's by at least
    :data:`MOVED_SEVERITY`."""
    return previous is not None and abs(severity - previous) >= MOVED_SEVERITY


def with_census(comparison: PairedComparison, census: Census) -> PairedComparison:
    """The kept version's table over the whole serving share (module text), at the
    comparison's confidence; the agreements split as the uniform labels' both-right to
    both-wrong (the served accuracy there when they show neither)."""
    concordant = comparison.both + comparison.neither
    if concordant:
        right = comparison.both / concordant
    else:
        right = comparison.b_accuracy if comparison.n else 1.0
    both = round(census.agree * right)
    neither = census.agree - both + census.both_wrong
    return paired_from_counts(both, census.kept_only, census.served_only, neither,
                              comparison.confidence)  # fmt: skip


def take_census(
    site: Labelling, deployment: DeploymentRecord, sample: TrafficWindow, kept: Sequence[int],
    predict: Predict, now: float,
) -> dict[int, Census]:  # fmt: skip
    """Each of ``kept`` (in order, while the cap lasts) against the served answers on the
    window's serving share, its disagreements golden-labelled (module text). Empty when
    the labeller has nothing to say (feedback only, or it failed: the uniform labels
    decide alone)."""
    serving = deployment.serving_version
    stored = [s for s in site.samples.window(deployment.id, sample.start, sample.end)
              if s.route is RouteKind.SERVING and s.version == serving]  # fmt: skip
    if not stored or not kept:
        return {}
    images = np.stack([s.input for s in stored])
    served = np.asarray([s.prediction for s in stored], dtype=np.int64)
    labels = np.asarray([-1 if s.label is None else s.label for s in stored], dtype=np.int64)
    answers = {n: np.asarray(predict(n, images), dtype=np.int64) for n in kept}
    todo: set[int] = set()
    counted: list[int] = []
    for n in kept:
        need = {int(i) for i in np.flatnonzero(answers[n] != served) if labels[i] < 0} - todo
        if len(todo) + len(need) <= CENSUS_CAP:
            todo |= need
            counted.append(n)
    if not _label(site, deployment, stored, images, labels, todo, now):
        return {}
    return {n: _count(n, answers[n], served, labels) for n in counted}


def take_canary_census(
    site: Labelling, deployment: DeploymentRecord, sample: TrafficWindow, predict: Predict,
    now: float,
) -> Census | None:  # fmt: skip
    """The canary against the serving version on every sampled request of the window,
    both shares, each version as it answered or in the shadow; the requests they answer
    apart golden-labelled, so the canary's table covers the whole window (its ``kept_only``
    is the canary right alone). None when those would overrun :data:`CENSUS_CAP` (so many
    disagreements show in the uniform labels anyway) or the labeller has nothing to say."""
    serving, canary = deployment.serving_version, deployment.canary_version
    if serving is None or canary is None:
        return None
    stored = [s for s in site.samples.window(deployment.id, sample.start, sample.end)
              if s.version in (serving, canary)]  # fmt: skip
    if not stored:
        return None
    images = np.stack([s.input for s in stored])
    answered = np.asarray([s.version for s in stored], dtype=np.int64)
    given = np.asarray([s.prediction for s in stored], dtype=np.int64)
    labels = np.asarray([-1 if s.label is None else s.label for s in stored], dtype=np.int64)
    answers = {n: answers_of(n, given, answered, images, predict) for n in (serving, canary)}
    todo = {int(i) for i in np.flatnonzero(answers[canary] != answers[serving]) if labels[i] < 0}
    if len(todo) > CENSUS_CAP or not _label(site, deployment, stored, images, labels, todo, now):
        return None
    return _count(canary, answers[canary], answers[serving], labels)


def _label(site: Labelling, deployment: DeploymentRecord, stored: Sequence[StoredSample],
           images: np.ndarray, labels: np.ndarray, todo: set[int], now: float) -> bool:  # fmt: skip
    """Golden-label the samples ``todo`` (indices into ``stored``; ``labels`` filled in
    place, and the store's labels written); False when the labeller has nothing to say."""
    if not todo:
        return True
    ids = sorted(todo)
    try:
        fresh = site.golden_labels(deployment, images[ids])
    except TenantCodeError:
        return False
    if fresh is None:
        return False
    site.samples.label_many(deployment.id, [(stored[i].request_id, int(y))
                                            for i, y in zip(ids, fresh, strict=True)],
                            GOLDEN_DISCORDANT, now)  # fmt: skip
    labels[ids] = np.asarray(fresh, dtype=np.int64)
    return True


def _count(number: int, mine: np.ndarray, theirs: np.ndarray, labels: np.ndarray) -> Census:
    differ = mine != theirs
    truth = labels[differ]
    mine_right, theirs_right = mine[differ] == truth, theirs[differ] == truth
    return Census(
        version=number,
        agree=int(np.count_nonzero(~differ)),
        kept_only=int(np.count_nonzero(mine_right & ~theirs_right)),
        served_only=int(np.count_nonzero(theirs_right & ~mine_right)),
        both_wrong=int(np.count_nonzero(~mine_right & ~theirs_right)),
    )
