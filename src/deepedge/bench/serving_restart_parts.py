"""The restart benchmark's judgement of what it saw (pure): health's sightings and the
inference requests of one restart, in; the figures and whether health told the truth, out.

Times are seconds since the restart (the new service spawned; negative: between the kill
and the restart). Let ``T`` be the earliest answer time of a 200 among the requests sent
after the kill (``T = inf`` when none was answered 200). A sighting ``h`` of a health
source is *premature* when it said serving and a request sent at or after it, and before
``T``, was not answered 200:

    premature(h)  <=>  h.serving  and  exists a: a.status != 200 and h.at_s <= a.sent_s < T

That is the claim a reader of health acts on (traffic sent once it says serving is
served), judged on what the endpoint did. Health is *truthful* when no sighting was
premature and it said serving at some point after the restart (a health that never says
serving misleads as much as one that says it too soon). A serving sighting before ``T``
whose later requests were all answered 200 is not premature: the requests answered 200
were on their way, and the data plane did serve when health said so.

``failed_midway_s`` measures the other way a start can be misreported: the seconds health
said failed after it had said starting and before ``T`` (each failed sighting counts until
the next sighting, or ``T``). Failed *before* any starting is the old host's document read
as its writer is gone, which is true; failed midway is a start a reader was told had failed
(a start that stopped reporting reads so), which may be true (the new host died) or not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from deepedge.controlplane.data_plane_health import DataPlaneState


@dataclass(frozen=True)
class Sighting:
    """What one health source said at one moment."""

    at_s: float
    http_status: int  # 0: no answer (the API or the data plane not listening, or too slow)
    state: DataPlaneState | None = None  # what it reported; None: nothing readable
    reason: str = ""

    @property
    def serving(self) -> bool:
        return self.state is DataPlaneState.SERVING

    @property
    def label(self) -> str:
        if self.state is not None:
            return self.state.value
        return "no answer" if self.http_status == 0 else f"HTTP {self.http_status}"


@dataclass(frozen=True)
class Attempt:
    """One inference request sent after the kill."""

    sent_s: float
    answered_s: float  # when its answer (or its failure) came
    status: int  # 0: no answer


@dataclass(frozen=True)
class Span:
    """A run of sightings with the same label: when it was first and last seen, and the
    reasons given in it (each once, in order)."""

    label: str
    first_s: float
    last_s: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailureCounts:
    """Requests not answered 200, by kind."""

    http_5xx: int = 0
    other_status: int = 0  # 4xx and anything else answered that is not 200
    no_answer: int = 0

    @property
    def total(self) -> int:
        return self.http_5xx + self.other_status + self.no_answer


@dataclass(frozen=True)
class RestartVerdict:
    first_200_s: float | None  # restart -> the first 200 answered (None: none was)
    first_serving_s: float | None  # restart -> a health source first said serving
    premature: int  # serving sightings a later request contradicted (module docstring)
    spans: tuple[Span, ...]  # what health said, in order
    failed_midway_s: float  # said failed after starting, before the first 200 (docstring)
    before_200: FailureCounts  # requests sent before the first 200 was answered, failed
    after_200: FailureCounts  # requests sent after it, failed

    @property
    def truthful(self) -> bool:
        return self.premature == 0 and self.first_serving_s is not None

    def said(self, state: DataPlaneState) -> bool:
        return any(span.label == state.value for span in self.spans)


def _spans(sightings: Sequence[Sighting]) -> tuple[Span, ...]:
    spans: list[Span] = []
    for s in sorted(sightings, key=lambda s: s.at_s):
        reason = (s.reason,) if s.reason else ()
        if spans and spans[-1].label == s.label:
            last = spans[-1]
            more = () if s.reason in last.reasons else reason
            spans[-1] = Span(last.label, last.first_s, s.at_s, last.reasons + more)
        else:
            spans.append(Span(s.label, s.at_s, s.at_s, reason))
    return tuple(spans)


def _failed_midway_s(sightings: Sequence[Sighting], first_200: float) -> float:
    ordered = sorted(sightings, key=lambda s: s.at_s)
    total, started = 0.0, False
    for here, after in zip(ordered, [*ordered[1:], None], strict=False):
        started = started or here.state is DataPlaneState.STARTING
        if started and here.state is DataPlaneState.FAILED and here.at_s < first_200:
            end = first_200 if after is None else min(after.at_s, first_200)
            total += 0.0 if math.isinf(end) else end - here.at_s
    return total


def _failures(attempts: Sequence[Attempt]) -> FailureCounts:
    failed = [a.status for a in attempts if a.status != 200]
    return FailureCounts(
        http_5xx=sum(500 <= s < 600 for s in failed),
        other_status=sum(s != 0 and not 500 <= s < 600 for s in failed),
        no_answer=sum(s == 0 for s in failed),
    )


def judge(sightings: Sequence[Sighting], attempts: Sequence[Attempt]) -> RestartVerdict:
    """The verdict on one restart (module docstring); ``attempts`` are the requests sent
    after the kill, ``sightings`` one health source's answers after it."""
    answered = [a.answered_s for a in attempts if a.status == 200]
    first_200 = min(answered) if answered else math.inf
    failed_sent = [a.sent_s for a in attempts if a.status != 200 and a.sent_s < first_200]
    premature = sum(
        1 for h in sightings if h.serving and any(h.at_s <= sent for sent in failed_sent)
    )
    serving = [h.at_s for h in sightings if h.serving and h.at_s >= 0]
    return RestartVerdict(
        first_200_s=None if math.isinf(first_200) else first_200,
        first_serving_s=min(serving) if serving else None,
        premature=premature,
        spans=_spans(sightings),
        failed_midway_s=_failed_midway_s(sightings, first_200),
        before_200=_failures([a for a in attempts if a.sent_s < first_200]),
        after_200=_failures([a for a in attempts if a.sent_s >= first_200]),
    )
