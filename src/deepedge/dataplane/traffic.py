"""Traffic figures: the requests a deployment's replicas answered, per second.

Each replica counts its requests per deployment and wall-clock second (:class:`TrafficRow`:
requests, canary and pinned ones, failures, images, summed latency and a latency histogram
over :data:`LATENCY_BUCKETS_MS`) and reports them about once a second; they are kept in the
sample store's ``traffic`` table for :data:`KEEP_S` and read back as a recent
:class:`TrafficSummary` (the API and the dashboard) or as the totals of what is kept
(:class:`~deepedge.dataplane.model_reports.TrafficTotals`, the model statistics).

**Where the latency is measured.** A replica times a request from the moment its handler
starts on it to its answer (:data:`REPLICA_WHERE`): the dynamic batch's wait and the
forward pass, not the proxies in front of it nor the queue before the replica. What a client
sees is measured at the data plane's ingress (:mod:`deepedge.dataplane.ingress_traffic`,
:data:`~deepedge.dataplane.ingress_traffic.INGRESS_WHERE`); both are summarised as a
:class:`Latency` over the same buckets.

The functions here run on a connection to the store (:mod:`deepedge.dataplane.sample_store`
owns the file, its schema and its transactions).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from deepedge.dataplane.model_reports import TrafficTotals


def _latency_bounds_ms(fine_to_ms: int = 20, step: float = 1.1, last_ms: float = 10_000.0
                       ) -> tuple[float, ...]:  # fmt: skip
    """Bucket upper bounds: one bucket per whole millisecond up to ``fine_to_ms`` (bounds
    at half milliseconds, so that a timing in whole milliseconds, HAProxy's, sits in the
    middle of its bucket), then about ``step`` - 1 wide each, up to ``last_ms``."""
    bounds = [k + 0.5 for k in range(fine_to_ms)]
    while bounds[-1] < last_ms:
        bounds.append(math.floor(bounds[-1] * step) + 0.5)
    return tuple(bounds)


# (fine enough to tell the ingress's figure from a replica's a millisecond or two apart; a
# histogram stored with the coarser buckets of before, 1-2-5 ms, is left out of quantiles)
LATENCY_BUCKETS_MS = _latency_bounds_ms()
KEEP_S = 3600.0  # the seconds of figures kept before the newest
REPLICA_WHERE = (
    "in the replica: from its handler taking the request to its answer (batch "
    "wait and forward pass; no proxy, no queue before the replica)"
)


@dataclass(frozen=True)
class TrafficRow:
    """One replica's requests for one deployment in one wall-clock second."""

    deployment: str
    second: int
    replica: str
    requests: int
    canary: int
    pinned: int
    failed: int
    images: int
    latency_ms_sum: float
    latency_hist: tuple[int, ...]  # counts per LATENCY_BUCKETS_MS upper bound, + overflow
    failed_ms_sum: float = 0.0  # the latency of the failed requests (of latency_ms_sum)


@dataclass(frozen=True)
class Latency:
    """The latency of ``requests`` timed at one place: quantiles of their histogram over
    :data:`LATENCY_BUCKETS_MS` (:func:`quantile`) and their mean; None without requests."""

    requests: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_ms: float | None

    @classmethod
    def of(cls, hist: Sequence[int], latency_ms_sum: float) -> Latency:
        requests = sum(hist)
        return cls(requests, quantile(hist, 0.5), quantile(hist, 0.95), quantile(hist, 0.99),
                   latency_ms_sum / requests if requests else None)  # fmt: skip

    def document(self) -> dict[str, float | int | None]:
        """The figures under ``latency_ms.<where>`` (milliseconds, as the parent names)."""
        return {"requests": self.requests, "p50": self.p50_ms, "p95": self.p95_ms,
                "p99": self.p99_ms, "mean": self.mean_ms}  # fmt: skip


@dataclass(frozen=True)
class TrafficSummary:
    """A deployment's traffic over the last ``span_s`` seconds, as its replicas counted it
    (``latency``: timed inside the replicas, :data:`REPLICA_WHERE`)."""

    span_s: float
    requests: int
    images: int
    failed: int
    rps: float
    canary_share: float | None  # of the routed (not pinned) requests
    latency: Latency

    def document(self) -> dict[str, float | int | None]:
        """The counts (the latency goes under ``latency_ms.replica``, beside the ingress's)."""
        return {
            "span_s": self.span_s,
            "requests": self.requests,
            "images": self.images,
            "failed": self.failed,
            "rps": self.rps,
            "canary_share": self.canary_share,
        }


def add_histograms(a: Sequence[int], b: Sequence[int]) -> list[int]:
    return [x + y for x, y in zip(a, b, strict=True)]


def stored_histogram(text: str) -> list[int]:
    """A histogram as stored (JSON); all zeros for one of other buckets (an older deepedge's)."""
    hist = json.loads(text)
    if not isinstance(hist, list) or len(hist) != len(LATENCY_BUCKETS_MS) + 1:
        return [0] * (len(LATENCY_BUCKETS_MS) + 1)
    return [int(n) for n in hist]


def histogram(latencies_ms: Iterable[float]) -> tuple[int, ...]:
    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    for value in latencies_ms:
        counts[bucket_of(value)] += 1
    return tuple(counts)


def bucket_of(latency_ms: float) -> int:
    for i, bound in enumerate(LATENCY_BUCKETS_MS):
        if latency_ms <= bound:
            return i
    return len(LATENCY_BUCKETS_MS)


def quantile(hist: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile of a latency histogram, interpolated linearly inside its bucket
    (the overflow bucket reads as its lower bound)."""
    total = sum(hist)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        if count and seen + count >= rank:
            low = 0.0 if i == 0 else float(LATENCY_BUCKETS_MS[i - 1])
            if i == len(LATENCY_BUCKETS_MS):
                return low
            high = float(LATENCY_BUCKETS_MS[i])
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return float(LATENCY_BUCKETS_MS[-1])


def record(conn: sqlite3.Connection, rows: Sequence[TrafficRow], keep_s: float = KEEP_S) -> None:
    """Add replicas' per-second traffic (rows of the same second and replica add up)
    and forget seconds older than ``keep_s`` before the newest."""
    for r in rows:
        old = conn.execute(
            "SELECT requests, canary, pinned, failed, images, latency_ms_sum, "
            "latency_hist, failed_ms_sum FROM traffic WHERE deployment = ? AND "
            "second = ? AND replica = ?",
            (r.deployment, r.second, r.replica),
        ).fetchone()
        hist = list(r.latency_hist)
        counts = [r.requests, r.canary, r.pinned, r.failed, r.images]
        total_ms, failed_ms = r.latency_ms_sum, r.failed_ms_sum
        if old is not None:
            counts = [a + b for a, b in zip(counts, old[:5], strict=True)]
            total_ms += old[5]
            failed_ms += old[7]
            hist = add_histograms(hist, stored_histogram(old[6]))
        conn.execute(
            "INSERT OR REPLACE INTO traffic (deployment, second, replica, requests, "
            "canary, pinned, failed, images, latency_ms_sum, latency_hist, "
            "failed_ms_sum) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (r.deployment, r.second, r.replica, *counts, total_ms, json.dumps(hist),
             failed_ms),
        )  # fmt: skip
    newest = max(r.second for r in rows)
    conn.execute("DELETE FROM traffic WHERE second < ?", (newest - keep_s,))


def totals(conn: sqlite3.Connection, deployment: str) -> TrafficTotals:
    """Everything the kept per-second figures of ``deployment`` add up to."""
    row = conn.execute(
        "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(images), 0), "
        "COALESCE(SUM(failed), 0), COALESCE(SUM(latency_ms_sum), 0), "
        "COALESCE(SUM(failed_ms_sum), 0), MIN(second), MAX(second) FROM traffic "
        "WHERE deployment = ?",
        (deployment,),
    ).fetchone()
    requests, images, failed, total_ms, failed_ms, first, last = row
    span_s = float(last - first + 1) if last is not None else 0.0
    return TrafficTotals(span_s, int(requests), int(images), int(failed), float(total_ms),
                         float(failed_ms), None if last is None else int(last))  # fmt: skip


def summary(
    conn: sqlite3.Connection, deployment: str, now: float, span_s: float = 10.0
) -> TrafficSummary:
    """Requests per second, the replicas' latency and the canary's share over the last
    ``span_s`` whole seconds before ``now``."""
    end = int(now)
    rows = conn.execute(
        "SELECT requests, canary, pinned, failed, images, latency_ms_sum, latency_hist "
        "FROM traffic WHERE deployment = ? AND second >= ? AND second < ?",
        (deployment, end - int(span_s), end),
    ).fetchall()
    requests = sum(r[0] for r in rows)
    canary = sum(r[1] for r in rows)
    pinned = sum(r[2] for r in rows)
    hist = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    for r in rows:
        hist = add_histograms(hist, stored_histogram(r[6]))
    routed = requests - pinned
    return TrafficSummary(
        span_s=float(int(span_s)),
        requests=requests,
        images=sum(r[4] for r in rows),
        failed=sum(r[3] for r in rows),
        rps=requests / max(1, int(span_s)),
        canary_share=canary / routed if routed else None,
        latency=Latency.of(hist, sum(r[5] for r in rows)),
    )
