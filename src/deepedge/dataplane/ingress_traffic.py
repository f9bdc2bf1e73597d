"""What a client sees: the latency of each request at the data plane's ingress.

The data plane's ingress (HAProxy, :mod:`deepedge.runtime.serving.ingress`) logs one line
per request it answered, in :data:`LOG_FORMAT`::

    <answer's end, ms since the epoch> <status> <Ta, ms> <method> <path>

``Ta`` is HAProxy's total active time of the request: from the first byte of the request
received to the last byte of the answer sent (a kept-alive connection's idle time left
out), in whole milliseconds. It holds every hop behind the ingress (Serve's proxy and
router, the replica's queue, batch and forward pass, the answer's way back), where a
replica's own figure (:data:`~deepedge.dataplane.traffic.REPLICA_WHERE`) holds only its
handler. :class:`IngressCounter` keeps the inference requests (``POST
/v2/models/<model>[/versions/<v>]/infer``) per model and second of their answer, the
requests the replicas count too: answered, or failed by the data plane (5xx, counted as
failed); those refused as the client's error (4xx) are left out, as the replicas leave
them out.

**Covered seconds.** The counter also knows the seconds it watched whole: HAProxy
listened for all of that second and its log was read. A second not covered (HAProxy
starting again, the reader or the store away) is a gap in the figures, never a second
without requests: :func:`summary` says how many of the span's seconds the figures cover
(:class:`Coverage`) and gives no latency at all when they cover none.

Rows are keyed by the model's name (``<tenant>.<deployment>``: the ingress knows no
deployment ids); a summary reads only the seconds from the deployment's creation on, so a
deployment never shows figures of an older one of the same name, and rows go after
:data:`~deepedge.dataplane.traffic.KEEP_S`. Pure but for the two functions on a store's
connection (:func:`record`, :func:`summary`;
:mod:`deepedge.dataplane.sample_store` owns the file and its transactions).
"""

from __future__ import annotations

import enum
import json
import math
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from deepedge.dataplane.traffic import (
    KEEP_S,
    LATENCY_BUCKETS_MS,
    Latency,
    add_histograms,
    bucket_of,
    stored_histogram,
)

# HAProxy's log-format (the answer's end from the date at logging time: the log is sent
# once the answer's last byte is)
LOG_FORMAT = "%[date(0,ms)] %ST %Ta %HM %HPO"
INGRESS_WHERE = (
    "at the data plane's ingress (HAProxy): from the request's first byte "
    "received to the answer's last byte sent, every hop behind it included"
)
GRACE_S = 1.0  # a second is taken this long after it ends (its last lines come meanwhile)
REPORT_LAG_S = 3  # a summary's span ends this many seconds before now: taken and stored
MAX_OPEN_KEYS = 10_000  # (model, second) pairs counted at once; more are dropped
_INFER = re.compile(r"/v2/models/([A-Za-z0-9][A-Za-z0-9._-]{0,200})(?:/versions/\d+)?/infer/*")

SCHEMA = """
CREATE TABLE IF NOT EXISTS ingress_traffic (
    model TEXT NOT NULL,
    second INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    latency_ms_sum REAL NOT NULL,
    latency_hist TEXT NOT NULL,
    PRIMARY KEY (model, second)
);
CREATE TABLE IF NOT EXISTS ingress_seconds (second INTEGER PRIMARY KEY);
"""


@dataclass(frozen=True)
class IngressRequest:
    """One inference request as the ingress answered it."""

    model: str
    end_s: float  # when its answer's last byte was sent
    status: int
    active_ms: float  # HAProxy's Ta


def parse_line(line: str) -> IngressRequest | None:
    """The inference request of one :data:`LOG_FORMAT` line; None for any other request,
    one refused as the client's error (4xx), or a line not in that form."""
    parts = line.split(maxsplit=4)
    if len(parts) != 5 or parts[3] != "POST":
        return None
    found = _INFER.fullmatch(parts[4].strip())
    try:
        end_ms, status, active_ms = int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    if found is None or status < 100 or 400 <= status < 500 or active_ms < 0:
        return None
    return IngressRequest(found.group(1), end_ms / 1000, status, float(active_ms))


@dataclass(frozen=True)
class IngressRow:
    """One model's inference requests answered by the ingress in one wall-clock second."""

    model: str
    second: int
    requests: int
    failed: int  # answered 5xx (the data plane's failure, or no data plane behind it)
    latency_ms_sum: float
    latency_hist: tuple[int, ...]  # counts per LATENCY_BUCKETS_MS upper bound, + overflow


@dataclass
class _Count:
    requests: int = 0
    failed: int = 0
    latency_ms_sum: float = 0.0
    hist: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))


class IngressCounter:
    """Requests per (model, second) and the covered seconds (module docstring), taken out
    by :meth:`take`. Times are wall-clock seconds, given, never read."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], _Count] = {}
        self._cover_from: int | None = None  # watching: the first second not taken yet
        self._covered: list[int] = []
        self.dropped = 0  # requests not counted: too many (model, second) pairs open

    def watch(self, since_s: float) -> None:
        """HAProxy listens, and its log is read, from ``since_s`` on."""
        if self._cover_from is None:
            self._cover_from = math.ceil(since_s)

    def unwatch(self, until_s: float) -> None:
        """No more from ``until_s`` on: the second it falls in is not whole."""
        if self._cover_from is not None:
            self._covered.extend(range(self._cover_from, int(until_s)))
            self._cover_from = None

    def add(self, request: IngressRequest) -> None:
        key = (request.model, int(request.end_s))
        count = self._counts.get(key)
        if count is None:
            if len(self._counts) >= MAX_OPEN_KEYS:
                self.dropped += 1
                return
            count = self._counts[key] = _Count()
        count.requests += 1
        count.failed += request.status >= 500
        count.latency_ms_sum += request.active_ms
        count.hist[bucket_of(request.active_ms)] += 1

    def take(self, before_s: float | None) -> tuple[list[IngressRow], list[int]]:
        """The rows of the seconds before ``before_s`` and the covered ones among them,
        taken out (None: every row; the covered seconds end where :meth:`unwatch` said)."""
        cut = None if before_s is None else int(before_s)
        if cut is not None and self._cover_from is not None and cut > self._cover_from:
            self._covered.extend(range(self._cover_from, cut))
            self._cover_from = cut
        done = [key for key in self._counts if cut is None or key[1] < cut]
        rows = []
        for model, second in done:
            c = self._counts.pop((model, second))
            rows.append(IngressRow(model, second, c.requests, c.failed, c.latency_ms_sum,
                                   tuple(c.hist)))  # fmt: skip
        covered, self._covered = self._covered, []
        return rows, covered


class Coverage(enum.Enum):
    """How much of a summary's span the ingress's figures cover: ``COMPLETE`` (every
    second), ``PARTIAL`` (some: the latency is that of the covered seconds), ``UNAVAILABLE``
    (none: no latency is given)."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class IngressLatency:
    """A model's requests as the ingress answered them over ``span_s`` seconds ending
    :data:`REPORT_LAG_S` before now, and how many of those seconds the figures cover."""

    span_s: int
    covered_s: int
    failed: int
    latency: Latency

    @property
    def coverage(self) -> Coverage:
        if self.covered_s == 0:
            return Coverage.UNAVAILABLE
        return Coverage.COMPLETE if self.covered_s >= self.span_s else Coverage.PARTIAL

    @property
    def reason(self) -> str:
        """Why the figures are not whole, in words ("" when they are)."""
        if self.coverage is Coverage.COMPLETE:
            return ""
        if self.span_s == 0:
            return "the deployment is newer than the ingress's figures"
        if self.coverage is Coverage.UNAVAILABLE:
            return (f"no figures from the data plane's ingress for these {self.span_s} s: it "
                    "is not running or is starting again")  # fmt: skip
        return (f"the ingress's figures cover {self.covered_s} of these {self.span_s} s (it "
                "started again, or its figures did not reach the store)")  # fmt: skip

    def document(self) -> dict[str, object]:
        """``latency_ms.proxy``: where it is measured, how whole, then the figures (None
        when no second is covered)."""
        shown = self.latency if self.covered_s else Latency(self.latency.requests, None, None,
                                                            None, None)  # fmt: skip
        return {"measured": INGRESS_WHERE, "state": self.coverage.value,
                "reason": self.reason, "span_s": self.span_s, "covered_s": self.covered_s,
                "failed": self.failed, **shown.document()}  # fmt: skip


def record(conn: sqlite3.Connection, rows: Sequence[IngressRow], covered: Sequence[int],
           keep_s: float = KEEP_S) -> None:  # fmt: skip
    """Add the ingress's rows (those of the same model and second add up) and covered
    seconds; forget what is older than ``keep_s`` before the newest."""
    for r in rows:
        old = conn.execute(
            "SELECT requests, failed, latency_ms_sum, latency_hist FROM ingress_traffic "
            "WHERE model = ? AND second = ?",
            (r.model, r.second),
        ).fetchone()
        requests, failed, total_ms, hist = r.requests, r.failed, r.latency_ms_sum, r.latency_hist
        if old is not None:
            requests, failed, total_ms = requests + old[0], failed + old[1], total_ms + old[2]
            hist = tuple(add_histograms(hist, stored_histogram(old[3])))
        conn.execute(
            "INSERT OR REPLACE INTO ingress_traffic (model, second, requests, failed, "
            "latency_ms_sum, latency_hist) VALUES (?,?,?,?,?,?)",
            (r.model, r.second, requests, failed, total_ms, json.dumps(list(hist))),
        )
    conn.executemany("INSERT OR IGNORE INTO ingress_seconds (second) VALUES (?)",
                     [(s,) for s in covered])  # fmt: skip
    seconds = [r.second for r in rows] + list(covered)
    if seconds:
        oldest = max(seconds) - keep_s
        conn.execute("DELETE FROM ingress_traffic WHERE second < ?", (oldest,))
        conn.execute("DELETE FROM ingress_seconds WHERE second < ?", (oldest,))


def summary(conn: sqlite3.Connection, model: str, now: float, span_s: float,
            since_s: float) -> IngressLatency:  # fmt: skip
    """``model``'s requests over the ``span_s`` whole seconds ending :data:`REPORT_LAG_S`
    before ``now``, none before ``since_s`` (the deployment's creation)."""
    end = int(now) - REPORT_LAG_S
    start = max(end - int(span_s), math.ceil(since_s))
    if start >= end:
        return IngressLatency(0, 0, 0, Latency(0, None, None, None, None))
    (covered,) = conn.execute(
        "SELECT COUNT(*) FROM ingress_seconds WHERE second >= ? AND second < ?", (start, end)
    ).fetchone()
    hist = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    total_ms, failed = 0.0, 0
    for row_failed, row_ms, row_hist in conn.execute(
        "SELECT failed, latency_ms_sum, latency_hist FROM ingress_traffic WHERE model = ? "
        "AND second >= ? AND second < ?",
        (model, start, end),
    ):
        hist = add_histograms(hist, stored_histogram(row_hist))
        total_ms, failed = total_ms + row_ms, failed + row_failed
    return IngressLatency(end - start, int(covered), failed, Latency.of(hist, total_ms))
