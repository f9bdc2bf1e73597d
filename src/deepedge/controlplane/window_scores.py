"""What one window of live traffic says of each version: which labelled samples it got
right, as served or in the shadow.

A version's correctness on a sample is the answer the data plane returned where that
version answered it, else its own prediction on the sample's input (its checked graph,
run here: the shadow). Two versions compared on the same samples give the paired table of
:mod:`deepedge.controlplane.evidence`.

* the serving version ``S`` on its own share (the requests the canary did not take: the
  served accuracy), and against the version it replaced ``P`` on every labelled sample
  (rollback);
* a canary ``C`` against ``S`` on every labelled sample, each as it answered or in the
  shadow (the canary's verdict: its share decides who is exposed, not the evidence);
* every window that tells, the versions that served before (``RETIRED``, the
  :data:`MAX_KEPT_SCORED` whose training data looked most like the window) in the shadow
  on ``S``'s share (a recurring condition).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from deepedge.controlplane.evidence import Accuracy, PairedComparison, accuracy, compare_paired
from deepedge.controlplane.records import DeploymentRecord, ModelVersion, WindowPoint
from deepedge.controlplane.recurring import data_distance
from deepedge.controlplane.rollout_status import VersionStatus
from deepedge.controlplane.window_facts import WindowFacts
from deepedge.dataplane.routing import RouteKind

if TYPE_CHECKING:
    from deepedge.controlplane.site import TrafficWindow

MAX_KEPT_SCORED = 4  # kept versions scored each window (inference only: milliseconds each;
# fewer share the confidence less thinly)

Predict = Callable[[int, np.ndarray], np.ndarray]  # version, images -> predicted classes


def answers_of(number: int, given: np.ndarray, answered_by: np.ndarray, images: np.ndarray,
               predict: Predict) -> np.ndarray:  # fmt: skip
    """Version ``number``'s answer to each request: the one ``given`` where it answered
    (``answered_by``), else its own prediction on the request's input (the shadow)."""
    mine = np.asarray(given, dtype=np.int64).copy()
    other = answered_by != number
    if other.any():
        mine[other] = np.asarray(predict(number, images[other]), dtype=np.int64)
    return mine


def correct(sample: TrafficWindow, number: int, mask: np.ndarray, predict: Predict) -> np.ndarray:
    """Whether version ``number`` got each sample of ``mask`` right (module text)."""
    predictions = answers_of(number, sample.predictions[mask], sample.versions[mask],
                             sample.images[mask], predict)  # fmt: skip
    right: np.ndarray = predictions == sample.labels[mask]
    return right


@dataclass(frozen=True)
class WindowScores:
    served: Accuracy | None
    versus_previous: PairedComparison | None
    canary_versus_serving: PairedComparison | None
    canary_accuracy: float | None
    previous_accuracy: float | None


def score_window(deployment: DeploymentRecord, sample: TrafficWindow, predict: Predict,
                 confidence: float) -> WindowScores:  # fmt: skip
    """The window's figures (module text). Comparisons take every labelled sample of the
    window, each version as it answered or in the shadow: a version's prediction is the
    same whether or not it answered, so the canary's share only decides who is exposed,
    not how much evidence there is. The served accuracy is the serving version's answers
    on its own share; the canary's (shown beside it) its answers on its share."""
    serving, previous, canary = (deployment.serving_version, deployment.previous_version,
                                 deployment.canary_version)  # fmt: skip
    assert serving is not None
    main, share = sample.share(RouteKind.SERVING), sample.share(RouteKind.CANARY)
    every = np.ones(len(sample.labels), dtype=bool)
    served = versus_previous = canary_versus_serving = None
    canary_acc = previous_acc = None
    if main.any():
        served = accuracy(correct(sample, serving, main, predict), confidence)
    if every.any() and (previous is not None or canary is not None):
        serving_right = correct(sample, serving, every, predict)
        if previous is not None:
            previous_right = correct(sample, previous, every, predict)
            versus_previous = compare_paired(serving_right, previous_right, confidence)
            previous_acc = float(np.mean(previous_right))
        if canary is not None:
            canary_right = correct(sample, canary, every, predict)
            canary_versus_serving = compare_paired(canary_right, serving_right, confidence)
            if share.any():
                canary_acc = float(np.mean(correct(sample, canary, share, predict)))
    return WindowScores(served, versus_previous, canary_versus_serving, canary_acc, previous_acc)


def kept_versions(versions: Mapping[int, ModelVersion], serving: int, severity: float) -> list[int]:
    """The versions that served before and may serve again, the :data:`MAX_KEPT_SCORED`
    whose training data looked most like this window (their data's drift severity nearest
    the window's: a condition that comes back looks as it did), newest first among equals;
    a version without that description (an upload) after those with one."""

    def distance(n: int) -> tuple[float, int]:
        return data_distance(versions[n], severity), -n

    kept = [n for n, v in versions.items() if v.status is VersionStatus.RETIRED and n != serving]
    return sorted(kept, key=distance)[:MAX_KEPT_SCORED]


Kept = tuple[tuple[int, PairedComparison], ...]


def score_kept(deployment: DeploymentRecord, sample: TrafficWindow, kept: Sequence[int],
               predict: Predict, confidence: float) -> Kept:  # fmt: skip
    """Each kept version against the serving one on the serving version's share, each
    interval at ``1 - (1 - confidence) / len(kept)`` (Bonferroni): the chance that any of
    them clears 0 by luck alone stays at most ``1 - confidence``, however many are kept."""
    serving = deployment.serving_version
    assert serving is not None
    main = sample.share(RouteKind.SERVING)
    if not main.any() or not kept:
        return ()
    serving_right = correct(sample, serving, main, predict)
    each = 1.0 - (1.0 - confidence) / len(kept)
    return tuple((n, compare_paired(correct(sample, n, main, predict), serving_right, each))
                 for n in kept)  # fmt: skip


def window_facts(deployment: DeploymentRecord, sample: TrafficWindow, scores: WindowScores,
                 versions: Mapping[int, ModelVersion], history: Sequence[WindowPoint],
                 now: float, last_undecided: str | None) -> WindowFacts:  # fmt: skip
    return WindowFacts(
        index=sample.index, due_at=sample.end, now=now, window_s=deployment.spec.window_s,
        versions=versions, served=scores.served, versus_previous=scores.versus_previous,
        canary_versus_serving=scores.canary_versus_serving, history=history,
        samples=len(sample.labels), severity=sample.severity,
        trainable=len(sample.labels) - sample.late + sample.chosen,
        canary_accuracy=scores.canary_accuracy, previous_accuracy=scores.previous_accuracy,
        last_undecided=last_undecided,
    )  # fmt: skip
