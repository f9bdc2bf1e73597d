"""What ``bench.accuracy`` measures: from the requests its camera sent, the deployment's
events, and models scored in the benchmark's own process.

**Pure measures** (no site, no torch; unit-tested on synthetic inputs). With ``a_w`` the
served accuracy of trace window ``w`` (answers against the true labels the camera kept),
``r_w`` the offline reference's on the same requests and ``t_w`` the window's start:

* ``acc_ratio = mean_w a_w / mean_w r_w`` over the windows where both are known;
* ``recovery_s = t_k - t_d``: ``t_d`` the first drifted request (the abrupt segment's first
  window's start), ``k`` the first window of that segment from which every window to the
  segment's end has ``a_w >= r_w - 0.03`` (``inf``: none);
* ``recovery_windows = k - s``: ``s`` the segment's first window, ``k`` the first window
  of the segment with ``a_k >= r_k - 0.03`` (``inf``: none);
* a **decision** is a promotion (after a canary, without one, or a kept version served
  again), a canary rolled back, or a serving version rolled back: the deployment's
  ``promoted`` and ``rolled-back`` events, the first version's own promotion aside. Each
  chose one version over an alternative (the one it replaced, the one kept serving). It is
  **wrong** when, on the answered requests of the ``3`` windows that start after it, both
  versions scored offline, ``acc(chosen) < acc(alternative) - 0.02``; without such a
  window it is not judged;
* an **update's time**: from its ``trigger`` event to the first answer the camera got from
  the version it triggered (as canary or serving); a version that never answered says
  why (its job failed, its gate rejected it, ...).

**Scoring** (torch, after the site run, on the very images the camera sent: the stream's
windows are deterministic in their index): the predictions of a version's model on a
window's answered requests, and the offline reference models (a segment's labelled data,
drawn afresh from its windows; the first version's weights to start from).
"""

from __future__ import annotations

import copy
import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.harness.percentiles import percentile
from deepedge.bench.harness.scale import Scale
from deepedge.learning.scheduled_stream import DriftTrace, drift_trace

BASE_WINDOWS = 2  # the deployment's default: the first version learns stream windows 0-1
TOLERANCE = 0.03  # a window within 3 points of the reference counts as recovered
WRONG_MARGIN = 0.02  # a decision the next windows contradict by more than 2 points
HORIZON_WINDOWS = 3  # the windows a decision is judged on


@dataclass(frozen=True)
class TraceSettings(Scale):
    """The benchmark's sizes: the drift trace's windows and the camera's rate."""

    window_s: float
    segment_windows: int
    ramp_windows: int
    rate: float = 60.0  # requests per second, one image each

    @property
    def per_window(self) -> int:
        """Requests (and stream images: each sent once) per window."""
        return round(self.rate * self.window_s)

    def trace(self) -> DriftTrace:
        return drift_trace(self.segment_windows, self.ramp_windows, lead_windows=BASE_WINDOWS)


@dataclass(frozen=True)
class Workload:
    name: str
    spec: dict[str, Any]  # the deployment
    feedback: float  # share of sampled requests whose true label the camera sends back
    reference_epochs: int
    reference_per_window: int | None  # images of each window the reference trains on


@dataclass
class SiteRun:
    """What one run of the trace on a real site recorded."""

    part: str
    workload: Workload
    settings: TraceSettings
    requests: list[Request] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # each window's first send (wall clock)
    sent: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    loop_windows: list[dict[str, Any]] = field(default_factory=list)
    models: dict[int, Path] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)  # stored labels by source
    evicted: int = 0
    startup_s: float = 0.0


Hits = tuple[int, int]  # (right, answered) over some requests


@dataclass(frozen=True)
class Request:
    """One answered request of the trace."""

    window: int  # trace window
    index: int  # the image of that window's stream window it sent
    label: int  # the true label the benchmark kept
    predicted: int
    version: int
    at: float  # wall-clock seconds of the answer
    sent_at: float  # and of the request


def window_starts(requests: Iterable[Request], scheduled: Sequence[float]) -> list[float]:
    """When each window began: its first request's send time (a camera that fell behind
    its schedule, its requests held back by those in flight, sends later than planned),
    else its scheduled start."""
    first = list(scheduled)
    seen: set[int] = set()
    for r in requests:
        if 0 <= r.window < len(first):
            first[r.window] = r.sent_at if r.window not in seen else min(first[r.window],
                                                                         r.sent_at)  # fmt: skip
            seen.add(r.window)
    return first


# -- accuracy per window --------------------------------------------------------------------


def window_accuracy(hits: Mapping[int, Hits], windows: int) -> np.ndarray:
    """``right / answered`` per window ``0..windows-1`` (nan: nothing answered)."""
    out = np.full(windows, np.nan)
    for w, (right, n) in hits.items():
        if 0 <= w < windows and n > 0:
            out[w] = right / n
    return out


def served_hits(requests: Iterable[Request]) -> dict[int, Hits]:
    """(right, answered) per window of what the site answered."""
    out: dict[int, list[int]] = {}
    for r in requests:
        tally = out.setdefault(r.window, [0, 0])
        tally[0] += r.predicted == r.label
        tally[1] += 1
    return {w: (right, n) for w, (right, n) in out.items()}


def ratio(served: np.ndarray, reference: np.ndarray) -> float:
    """Mean served accuracy over mean reference accuracy, on the windows both have."""
    both = np.isfinite(served) & np.isfinite(reference)
    if not both.any() or reference[both].mean() == 0:
        return math.nan
    return float(served[both].mean() / reference[both].mean())


def gain(served: np.ndarray, other: np.ndarray) -> float:
    """Mean served accuracy minus ``other``'s, on the windows both have."""
    both = np.isfinite(served) & np.isfinite(other)
    return float(served[both].mean() - other[both].mean()) if both.any() else math.nan


def _within(served: np.ndarray, reference: np.ndarray, w: int, tolerance: float) -> bool:
    return bool(np.isfinite(served[w]) and np.isfinite(reference[w])
                and served[w] >= reference[w] - tolerance)  # fmt: skip


def recovery_s(
    served: np.ndarray, reference: np.ndarray, starts: Sequence[float], first: int, end: int,
    tolerance: float = TOLERANCE,
) -> float:  # fmt: skip
    """Seconds from the start of window ``first`` (the first drifted request) to the start
    of the first window of ``[first, end)`` from which every window to ``end`` is within
    ``tolerance`` of the reference (module docstring); ``inf`` when none is."""
    recovered: int | None = None
    for w in range(end - 1, first - 1, -1):
        if not _within(served, reference, w, tolerance):
            break
        recovered = w
    return math.inf if recovered is None else float(starts[recovered] - starts[first])


def recovery_windows(
    served: np.ndarray, reference: np.ndarray, first: int, end: int, tolerance: float = TOLERANCE
) -> float:
    """Windows from ``first`` to the first window of ``[first, end)`` within ``tolerance``
    of the reference (0: the first one is); ``inf`` when none is."""
    for w in range(first, end):
        if _within(served, reference, w, tolerance):
            return float(w - first)
    return math.inf


# -- decisions ------------------------------------------------------------------------------


class DecisionKind(enum.StrEnum):
    PROMOTION = "promotion"  # served at once, without a canary
    CANARY_PROMOTION = "canary-promotion"  # the canary's verdict: promoted
    CANARY_ROLLBACK = "canary-rollback"  # the canary's verdict: rolled back
    ROLLBACK = "rollback"  # the serving version rolled back to the one it replaced
    RESTORE = "restore"  # a kept version serves again on a drift


@dataclass(frozen=True)
class Decision:
    at: float
    kind: DecisionKind
    chosen: int
    alternative: int
    message: str


def decisions(events: Sequence[Mapping[str, Any]]) -> list[Decision]:
    """The decisions of the module docstring, in the order of the deployment's events
    (``promoted``, ``canary-started`` and ``rolled-back`` events as the API gives them)."""
    serving: int | None = None
    canary: int | None = None
    out: list[Decision] = []
    for e in sorted(events, key=lambda e: int(e["seq"])):
        kind, version, detail = e["kind"], e.get("version"), e.get("detail") or {}
        if kind == "canary-started" and version is not None:
            canary = int(version)
        elif kind == "promoted" and version is not None:
            if serving is not None and serving != int(version):
                how = (DecisionKind.RESTORE if detail.get("restored")
                       else DecisionKind.CANARY_PROMOTION if int(version) == canary
                       else DecisionKind.PROMOTION)  # fmt: skip
                out.append(Decision(float(e["at"]), how, int(version), serving, e["message"]))
            serving, canary = int(version), None
        elif kind == "rolled-back" and version is not None:
            if detail.get("to_version") is not None:
                back = int(detail["to_version"])
                out.append(Decision(float(e["at"]), DecisionKind.ROLLBACK, back, int(version),
                                    e["message"]))  # fmt: skip
                serving, canary = back, None
            elif serving is not None:
                out.append(Decision(float(e["at"]), DecisionKind.CANARY_ROLLBACK, serving,
                                    int(version), e["message"]))  # fmt: skip
                canary = None
    return out


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    windows: tuple[int, ...]  # the windows it was judged on
    chosen_accuracy: float
    alternative_accuracy: float

    @property
    def judged(self) -> bool:
        return bool(self.windows)

    @property
    def wrong(self) -> bool:
        return self.judged and self.chosen_accuracy < self.alternative_accuracy - WRONG_MARGIN


def judged_windows(at: float, starts: Sequence[float], horizon: int = HORIZON_WINDOWS
                   ) -> tuple[int, ...]:  # fmt: skip
    """The first ``horizon`` windows that start at or after ``at``."""
    return tuple(w for w, start in enumerate(starts) if start >= at)[:horizon]


def judge(
    decision: Decision, starts: Sequence[float], hits: Mapping[int, Mapping[int, Hits]],
    horizon: int = HORIZON_WINDOWS,
) -> Verdict:  # fmt: skip
    """``decision`` scored on the windows after it: ``hits[version][window]`` = (right,
    answered) of ``version``'s own predictions on that window's answered requests."""
    windows = judged_windows(decision.at, starts, horizon)

    def pooled(version: int) -> float:
        right = sum(hits.get(version, {}).get(w, (0, 0))[0] for w in windows)
        n = sum(hits.get(version, {}).get(w, (0, 0))[1] for w in windows)
        return right / n if n else math.nan

    if not windows:
        return Verdict(decision, (), math.nan, math.nan)
    return Verdict(decision, windows, pooled(decision.chosen), pooled(decision.alternative))


# -- updates --------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdateTime:
    version: int
    triggered_at: float
    answered_at: float | None  # its first answer the camera got
    outcome: str  # answered, job-failed, rejected, rolled-back, cancelled, pending

    @property
    def seconds(self) -> float | None:
        return None if self.answered_at is None else self.answered_at - self.triggered_at


def first_answers(requests: Iterable[Request]) -> dict[int, float]:
    """version -> the time of its first answer."""
    out: dict[int, float] = {}
    for r in requests:
        out[r.version] = min(r.at, out.get(r.version, math.inf))
    return out


OUTCOMES = {"job-failed": "job-failed", "gate-failed": "rejected", "rolled-back": "rolled-back",
            "cancelled": "cancelled"}  # fmt: skip


def update_times(events: Sequence[Mapping[str, Any]], answered: Mapping[int, float]
                 ) -> list[UpdateTime]:  # fmt: skip
    """One per ``trigger`` event (module docstring)."""
    out = []
    for e in events:
        if e["kind"] != "trigger" or e.get("version") is None:
            continue
        version = int(e["version"])
        first = answered.get(version)
        outcome = "answered" if first is not None else next(
            (OUTCOMES[x["kind"]] for x in events
             if x.get("version") == version and x["kind"] in OUTCOMES), "pending")  # fmt: skip
        out.append(UpdateTime(version, float(e["at"]), first, outcome))
    return out


# -- scoring (torch) ------------------------------------------------------------------------


Window = tuple[np.ndarray, np.ndarray]  # the images and true labels of a stream window


def version_hits(
    predict: Callable[[np.ndarray], np.ndarray], images: np.ndarray,
    requests: Sequence[Request],
) -> Hits:  # fmt: skip
    """(right, answered) of a model's own predictions on ``requests`` (one window's, whose
    images are ``images[r.index]``)."""
    if not requests:
        return 0, 0
    index = np.asarray([r.index for r in requests])
    labels = np.asarray([r.label for r in requests])
    return int((predict(images[index]) == labels).sum()), len(requests)


def train_reference(
    first: Any, images: np.ndarray, labels: np.ndarray, epochs: int, seed: int
) -> Any:
    """The offline reference of one segment: the first version's model (a copy, warm
    start) trained ``epochs`` epochs on the segment's labelled images (local SGD,
    :func:`~deepedge.learning.training.train_epochs` with its defaults)."""
    from deepedge.learning.training import TrainConfig, train_epochs

    model = copy.deepcopy(first)
    model.train()
    train_epochs(model, images, labels, epochs, TrainConfig(), seed=seed)
    return model.eval()


# -- one run measured -----------------------------------------------------------------------


@dataclass
class Measured:
    """One site run's per-window series, verdicts, update times and figures."""

    run: SiteRun
    served: np.ndarray
    no_update: np.ndarray
    reference: np.ndarray
    verdicts: list[Verdict]
    updates: list[UpdateTime]
    figures: dict[str, float]


def measure(
    run: SiteRun, source: Callable[[int], Window], fresh: Callable[[int], Window]
) -> Measured:
    """Score the references and the decisions on the run's requests (module docstring);
    ``source(t)`` gives stream window ``t`` as the camera sent it, ``fresh(t)`` another
    draw of it (what the offline reference trains on)."""
    from deepedge.controlplane.artifacts import load_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.learning.scheduled_stream import SEGMENTS
    from deepedge.learning.training import predict

    workload, trace = run.workload, run.settings.trace()
    spec = DeploymentSpec.model_validate(workload.spec)
    by_window: dict[int, list[Request]] = {}
    for r in run.requests:
        by_window.setdefault(r.window, []).append(r)
    first = load_version(spec, run.models[1])
    references = []
    for segment in range(len(SEGMENTS)):
        images, labels = _segment_data(fresh, trace, segment, workload.reference_per_window)
        references.append(train_reference(first, images, labels, workload.reference_epochs,
                                          segment))  # fmt: skip
    found = decisions(run.events)
    judged_on: dict[int, set[int]] = {}  # window -> the versions judged there
    for d in found:
        for w in judged_windows(d.at, run.starts):
            judged_on.setdefault(w, set()).update((d.chosen, d.alternative))
    models: dict[int, Any] = {}
    hits: dict[int, dict[int, Hits]] = {}
    no_update_hits: dict[int, Hits] = {}
    reference_hits: dict[int, Hits] = {}
    for w in range(trace.windows):
        requests = by_window.get(w, [])
        images, _ = source(trace.lead_windows + w)
        no_update_hits[w] = version_hits(partial(predict, first), images, requests)
        model = references[trace.segment_of(w)]
        reference_hits[w] = version_hits(partial(predict, model), images, requests)
        for version in sorted(judged_on.get(w, ())):
            if version not in models and version in run.models:
                models[version] = load_version(spec, run.models[version])
            if version in models:
                scored = version_hits(partial(predict, models[version]), images, requests)
                hits.setdefault(version, {})[w] = scored
    served = window_accuracy(served_hits(run.requests), trace.windows)
    no_update = window_accuracy(no_update_hits, trace.windows)
    reference = window_accuracy(reference_hits, trace.windows)
    verdicts = [judge(d, run.starts, hits) for d in found]
    updates = update_times(run.events, first_answers(run.requests))
    return Measured(run, served, no_update, reference, verdicts, updates,
                    figures(run, served, no_update, reference, verdicts, updates))  # fmt: skip


def figures(
    run: SiteRun, served: np.ndarray, no_update: np.ndarray, reference: np.ndarray,
    verdicts: Sequence[Verdict], updates: Sequence[UpdateTime],
) -> dict[str, float]:  # fmt: skip
    """The run's figures (the RESULT line takes its keys from these)."""
    trace = run.settings.trace()
    seconds = [u.seconds for u in updates if u.seconds is not None]
    answered = len(run.requests)
    abrupt, gradual, recurring = (trace.segment_start(k) for k in (1, 2, 3))

    def share(source: str) -> float:
        """Labels of ``source``, or of every golden source (``golden``: the uniform draw,
        the least sure answers, the disagreements), per served request."""
        count = sum(n for s, n in run.labels.items()
                    if s == source or (source == "golden" and s.startswith("golden-")))  # fmt: skip
        return count / answered if answered else math.nan

    return {
        "acc_ratio": ratio(served, reference),
        "recovery_s": recovery_s(served, reference, run.starts, abrupt, gradual),
        "recovery_windows_recurring": recovery_windows(served, reference, recurring, trace.windows),
        "wrong_decisions": sum(v.wrong for v in verdicts),
        "decisions": len(verdicts),
        "update_p50_s": percentile(seconds, 50),
        "update_p95_s": percentile(seconds, 95),
        "updates_failed": sum(u.outcome == "job-failed" for u in updates),
        "labels_frac": share("golden"),
        "feedback_frac": share("feedback"),
        "gain_vs_no_update": gain(served, no_update),
        "served_mean": _mean(served),
        "no_update_mean": _mean(no_update),
        "reference_mean": _mean(reference),
        "sent_requests": sum(run.sent),
        "failed_requests": sum(run.failed),
    }


def _mean(series: np.ndarray) -> float:
    return float(np.nanmean(series)) if np.isfinite(series).any() else math.nan


def _segment_data(source: Callable[[int], Window], trace: DriftTrace, segment: int,
                  per_window: int | None) -> Window:  # fmt: skip
    """A segment's labelled images: every image of each of its windows, or the first
    ``per_window`` of each."""
    images, labels = [], []
    start = trace.segment_start(segment)
    for w in range(start, start + trace.segment_windows):
        x, y = source(trace.lead_windows + w)
        images.append(x[:per_window])
        labels.append(y[:per_window])
    return np.concatenate(images), np.concatenate(labels)
