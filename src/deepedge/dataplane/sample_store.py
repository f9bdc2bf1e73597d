"""The site's sample store: served requests kept on the site's own disk to learn from.

A configurable share of the requests a deployment serves is kept here: the input tensor as
the camera sent it, the prediction, the version that made it, how it was routed (serving,
canary, or pinned to a version by the client) and when. The application may later label a
sample by its request id (feedback); the control plane labels the rest with the
deployment's golden labeller. Windows are read back by time (:meth:`SampleStore.window`)
for the accuracy monitor, the trigger, the gate, the canary verdict and the retraining data.

One SQLite file in WAL mode (``synchronous=NORMAL``): an append is acknowledged once its
transaction has committed, which survives a kill -9 of the writing process (not the loss of
the machine's power, which would take the last commits with it). Several processes share it:
the data plane's writer appends, the control plane labels and reads, the API reads the
traffic figures.

**Retention.** Each deployment is bounded by its :class:`Retention`: after every append the
oldest samples beyond ``max_samples``, ``max_bytes`` or ``max_age_s`` are evicted in the
same transaction and counted (:meth:`usage`). An append never waits for room: a full store
evicts, it does not refuse.

**Traffic.** Replicas also report per-second request counts and latency histograms
(:meth:`record_traffic`), summarised by :meth:`traffic` for the API and the dashboard.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.dataplane.routing import RouteKind

SAMPLES_FILE = Path("samples") / "samples.db"  # under the service's data folder
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    deployment TEXT NOT NULL,
    request_id TEXT NOT NULL,
    at REAL NOT NULL,
    version INTEGER NOT NULL,
    route TEXT NOT NULL,
    prediction INTEGER NOT NULL,
    dtype TEXT NOT NULL,
    shape TEXT NOT NULL,
    input BLOB NOT NULL,
    bytes INTEGER NOT NULL,
    label INTEGER,
    label_source TEXT,
    labelled_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS samples_request ON samples (deployment, request_id);
CREATE INDEX IF NOT EXISTS samples_time ON samples (deployment, at);
CREATE TABLE IF NOT EXISTS usage (
    deployment TEXT PRIMARY KEY,
    samples INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0,
    appended INTEGER NOT NULL DEFAULT 0,
    evicted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS traffic (
    deployment TEXT NOT NULL,
    second INTEGER NOT NULL,
    replica TEXT NOT NULL,
    requests INTEGER NOT NULL,
    canary INTEGER NOT NULL,
    pinned INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    images INTEGER NOT NULL,
    latency_ms_sum REAL NOT NULL,
    latency_hist TEXT NOT NULL,
    PRIMARY KEY (deployment, second, replica)
);
"""


@dataclass(frozen=True)
class Retention:
    """How much of a deployment's traffic the store keeps (the oldest goes first)."""

    max_samples: int = 20_000
    max_bytes: int = 512 << 20
    max_age_s: float = 7 * 86_400.0


@dataclass(frozen=True)
class Sample:
    """One served request, as the data plane hands it over."""

    request_id: str
    at: float
    version: int
    route: RouteKind
    prediction: int
    input: np.ndarray  # one image, as the camera sent it (without the batch axis)


@dataclass(frozen=True)
class StoredSample:
    request_id: str
    at: float
    version: int
    route: RouteKind
    prediction: int
    input: np.ndarray
    label: int | None
    label_source: str | None


@dataclass(frozen=True)
class Usage:
    samples: int
    bytes: int
    appended: int
    evicted: int


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


@dataclass(frozen=True)
class TrafficSummary:
    """A deployment's traffic over the last ``span_s`` seconds."""

    span_s: float
    requests: int
    images: int
    failed: int
    rps: float
    canary_share: float | None  # of the routed (not pinned) requests
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    latency_mean_ms: float | None

    def document(self) -> dict[str, float | int | None]:
        return {
            "span_s": self.span_s,
            "requests": self.requests,
            "images": self.images,
            "failed": self.failed,
            "rps": self.rps,
            "canary_share": self.canary_share,
            "latency_p50_ms": self.latency_p50_ms,
            "latency_p99_ms": self.latency_p99_ms,
            "latency_mean_ms": self.latency_mean_ms,
        }


def sample_store_path(data_dir: Path) -> Path:
    return Path(data_dir) / SAMPLES_FILE


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


class SampleStore:
    """The sample store in one SQLite file (module docstring). Thread-safe: one connection
    per thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connection().executescript(_SCHEMA)  # (each statement commits by itself)

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- writing --------------------------------------------------------------------------

    def append(
        self,
        deployment: str,
        samples: Sequence[Sample],
        retention: Retention,
        now: float | None = None,
    ) -> int:
        """Store ``samples`` (a request id already stored is kept as it was) and evict what
        the retention rule no longer admits, in one transaction; returns how many were
        evicted. Once this returns, every sample of ``samples`` is durable."""
        now = time.time() if now is None else now
        rows = [
            (
                deployment, s.request_id, s.at, s.version, s.route.value, s.prediction,
                s.input.dtype.str, json.dumps(list(s.input.shape)),
                np.ascontiguousarray(s.input).tobytes(), s.input.nbytes,
            )
            for s in samples
        ]  # fmt: skip
        added = added_bytes = 0
        with self._transaction() as conn:
            for row in rows:
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO samples (deployment, request_id, at, version, route, "
                    "prediction, dtype, shape, input, bytes) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    row,
                )
                if cursor.rowcount:  # (a request id already stored is left as it was)
                    added += 1
                    added_bytes += row[9]
            conn.execute(
                "INSERT INTO usage (deployment, samples, bytes, appended) VALUES (?,?,?,?) "
                "ON CONFLICT (deployment) DO UPDATE SET samples = samples + excluded.samples, "
                "bytes = bytes + excluded.bytes, appended = appended + excluded.appended",
                (deployment, added, added_bytes, added),
            )
            return self._evict(conn, deployment, retention, now)

    @staticmethod
    def _evict(conn: sqlite3.Connection, deployment: str, retention: Retention, now: float) -> int:
        """Delete what the retention rule no longer admits: every sample older than
        ``max_age_s``, then the oldest until both ``max_samples`` and ``max_bytes`` hold."""
        aged_count, aged_bytes = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM samples WHERE deployment = ? AND at < ?",
            (deployment, now - retention.max_age_s),
        ).fetchone()
        if aged_count:
            conn.execute(
                "DELETE FROM samples WHERE deployment = ? AND at < ?",
                (deployment, now - retention.max_age_s),
            )
        samples, size = conn.execute(
            "SELECT samples, bytes FROM usage WHERE deployment = ?", (deployment,)
        ).fetchone()
        samples, size = samples - aged_count, size - aged_bytes
        count, nbytes, last = aged_count, aged_bytes, None
        if samples > retention.max_samples or size > retention.max_bytes:
            for seq, row_bytes in conn.execute(
                "SELECT seq, bytes FROM samples WHERE deployment = ? ORDER BY seq", (deployment,)
            ):
                if samples <= retention.max_samples and size <= retention.max_bytes:
                    break
                last = seq
                samples, size = samples - 1, size - row_bytes
                count, nbytes = count + 1, nbytes + row_bytes
            if last is not None:
                conn.execute(
                    "DELETE FROM samples WHERE deployment = ? AND seq <= ?", (deployment, last)
                )
        if count:
            conn.execute(
                "UPDATE usage SET samples = samples - ?, bytes = bytes - ?, "
                "evicted = evicted + ? WHERE deployment = ?",
                (count, nbytes, count, deployment),
            )
        return int(count)

    def label(
        self,
        deployment: str,
        request_id: str,
        label: int,
        source: str,
        now: float | None = None,
    ) -> bool:
        """Label a stored sample; False when no sample has that request id (unknown, not
        sampled, or evicted). Feedback overrides a golden label, never the other way."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT label_source FROM samples WHERE deployment = ? AND request_id = ?",
                (deployment, request_id),
            ).fetchone()
            if row is None:
                return False
            if row[0] == FEEDBACK and source != FEEDBACK:
                return True
            conn.execute(
                "UPDATE samples SET label = ?, label_source = ?, labelled_at = ? "
                "WHERE deployment = ? AND request_id = ?",
                (int(label), source, now, deployment, request_id),
            )
        return True

    def label_many(
        self, deployment: str, labels: Sequence[tuple[str, int]], source: str, now: float
    ) -> None:
        """Golden labels for many samples at once (a feedback label already there stays)."""
        with self._transaction() as conn:
            conn.executemany(
                "UPDATE samples SET label = ?, label_source = ?, labelled_at = ? "
                "WHERE deployment = ? AND request_id = ? "
                "AND (label_source IS NULL OR label_source != ?)",
                [(int(y), source, now, deployment, rid, FEEDBACK) for rid, y in labels],
            )

    def delete_deployment(self, deployment: str) -> int:
        with self._transaction() as conn:
            n = conn.execute("DELETE FROM samples WHERE deployment = ?", (deployment,)).rowcount
            conn.execute("DELETE FROM usage WHERE deployment = ?", (deployment,))
            conn.execute("DELETE FROM traffic WHERE deployment = ?", (deployment,))
        return int(n)

    def record_traffic(self, rows: Sequence[TrafficRow], keep_s: float = 3600.0) -> None:
        """Add replicas' per-second traffic (rows of the same second and replica add up)
        and forget seconds older than ``keep_s`` before the newest."""
        if not rows:
            return
        with self._transaction() as conn:
            for r in rows:
                old = conn.execute(
                    "SELECT requests, canary, pinned, failed, images, latency_ms_sum, "
                    "latency_hist FROM traffic WHERE deployment = ? AND second = ? AND "
                    "replica = ?",
                    (r.deployment, r.second, r.replica),
                ).fetchone()
                hist = list(r.latency_hist)
                counts = [r.requests, r.canary, r.pinned, r.failed, r.images]
                total_ms = r.latency_ms_sum
                if old is not None:
                    counts = [a + b for a, b in zip(counts, old[:5], strict=True)]
                    total_ms += old[5]
                    hist = [a + b for a, b in zip(hist, json.loads(old[6]), strict=True)]
                conn.execute(
                    "INSERT OR REPLACE INTO traffic VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (r.deployment, r.second, r.replica, *counts, total_ms, json.dumps(hist)),
                )
            newest = max(r.second for r in rows)
            conn.execute("DELETE FROM traffic WHERE second < ?", (newest - keep_s,))

    # -- reading --------------------------------------------------------------------------

    _COLUMNS = (
        "request_id, at, version, route, prediction, dtype, shape, input, label, label_source"
    )

    @staticmethod
    def _decode(row: tuple[Any, ...]) -> StoredSample:
        rid, at, version, route, prediction, dtype, shape, blob, label, source = row
        array = np.frombuffer(blob, dtype=np.dtype(dtype)).reshape(json.loads(shape))
        return StoredSample(rid, at, version, RouteKind(route), prediction, array, label, source)

    def window(self, deployment: str, start: float, end: float) -> list[StoredSample]:
        """The samples served in ``[start, end)``, oldest first."""
        rows = (
            self._connection()
            .execute(
                f"SELECT {self._COLUMNS} FROM samples WHERE deployment = ? AND at >= ? AND at < ? "
                "ORDER BY at, seq",
                (deployment, start, end),
            )
            .fetchall()
        )
        return [self._decode(row) for row in rows]

    def get(self, deployment: str, request_id: str) -> StoredSample | None:
        row = (
            self._connection()
            .execute(
                f"SELECT {self._COLUMNS} FROM samples WHERE deployment = ? AND request_id = ?",
                (deployment, request_id),
            )
            .fetchone()
        )
        return None if row is None else self._decode(row)

    def usage(self, deployment: str) -> Usage:
        row = (
            self._connection()
            .execute(
                "SELECT samples, bytes, appended, evicted FROM usage WHERE deployment = ?",
                (deployment,),
            )
            .fetchone()
        )
        return Usage(*row) if row is not None else Usage(0, 0, 0, 0)

    def all_usage(self) -> dict[str, Usage]:
        rows = self._connection().execute(
            "SELECT deployment, samples, bytes, appended, evicted FROM usage"
        ).fetchall()
        return {row[0]: Usage(*row[1:]) for row in rows}

    def traffic(self, deployment: str, now: float, span_s: float = 10.0) -> TrafficSummary:
        """Requests per second, latency quantiles and the canary's share over the last
        ``span_s`` whole seconds before ``now``."""
        end = int(now)
        rows = (
            self._connection()
            .execute(
                "SELECT requests, canary, pinned, failed, images, latency_ms_sum, latency_hist "
                "FROM traffic WHERE deployment = ? AND second >= ? AND second < ?",
                (deployment, end - int(span_s), end),
            )
            .fetchall()
        )
        requests = sum(r[0] for r in rows)
        canary = sum(r[1] for r in rows)
        pinned = sum(r[2] for r in rows)
        hist = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        for r in rows:
            hist = [a + b for a, b in zip(hist, json.loads(r[6]), strict=True)]
        routed = requests - pinned
        return TrafficSummary(
            span_s=float(int(span_s)),
            requests=requests,
            images=sum(r[4] for r in rows),
            failed=sum(r[3] for r in rows),
            rps=requests / max(1, int(span_s)),
            canary_share=canary / routed if routed else None,
            latency_p50_ms=quantile(hist, 0.5),
            latency_p99_ms=quantile(hist, 0.99),
            latency_mean_ms=sum(r[5] for r in rows) / requests if requests else None,
        )


FEEDBACK = "feedback"  # a label the application sent for a request
GOLDEN = "golden"  # a label the deployment's golden labeller gave
