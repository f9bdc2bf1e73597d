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
oldest samples (by the time they were served) beyond ``max_samples``, ``max_bytes`` or
``max_age_s`` are evicted in the same transaction and counted (:meth:`usage`). An append
never waits for room: a full store evicts, it does not refuse.

**Traffic.** Replicas also report per-second request counts and latency histograms
(:meth:`record_traffic`), summarised by :meth:`traffic` for the API and the dashboard and
totalled by :meth:`traffic_totals` for the model statistics
(:mod:`deepedge.dataplane.traffic`); the data plane's ingress reports what a client sees,
each model's latency from the request's arrival to the answer sent
(:meth:`record_ingress`, :meth:`ingress_latency`; :mod:`deepedge.dataplane.ingress_traffic`).

**Deletion.** A deleted deployment's samples, counts and traffic go in one transaction
(:meth:`delete_deployment`), and samples that arrive for it afterwards are dropped. A
tenant may delete some of a deployment's samples, or all, and keep it
(:meth:`delete_samples`); either deletion overwrites the removed inputs in the file and
checkpoints the write-ahead log that held them. :meth:`snapshot` reads a consistent view
for an export (:mod:`deepedge.dataplane.sample_export`).

**Privacy.** The file holds every tenant's raw inputs: it is created 0600 (SQLite gives
its ``-wal`` and ``-shm`` files the same mode) in a 0700 folder, and a store left wider by
an older deepedge is narrowed when opened.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.core.durable import private_folder
from deepedge.dataplane import ingress_traffic as at_ingress
from deepedge.dataplane import sample_selection as selected
from deepedge.dataplane import traffic as figures
from deepedge.dataplane.ingress_traffic import IngressLatency, IngressRow
from deepedge.dataplane.model_reports import TrafficTotals
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_selection import DeletedSamples, SampleSelection
from deepedge.dataplane.traffic import KEEP_S, TrafficRow, TrafficSummary

# (the traffic figures lived here once: still importable from here)
from deepedge.dataplane.traffic import LATENCY_BUCKETS_MS as LATENCY_BUCKETS_MS
from deepedge.dataplane.traffic import bucket_of as bucket_of
from deepedge.dataplane.traffic import histogram as histogram
from deepedge.dataplane.traffic import quantile as quantile

SAMPLES_FILE = Path("samples") / "samples.db"  # under the service's data folder
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
    labelled_at REAL,
    client_id TEXT
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
    failed_ms_sum REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (deployment, second, replica)
);
CREATE TABLE IF NOT EXISTS deleted (
    deployment TEXT PRIMARY KEY,
    at REAL NOT NULL,
    samples INTEGER NOT NULL
);
"""
# Added after the first stores were written (created by _migrate on an older file)
_CLIENT_ID_INDEX = "CREATE INDEX IF NOT EXISTS samples_client ON samples (deployment, client_id)"
FILE_MODE = 0o600  # the store holds every tenant's raw inputs: the service's user only
FOLDER_MODE = 0o700


# a deployment's samples from the oldest served, in the (deployment, at) index's own order
OLDEST_FIRST = "SELECT seq, at, bytes FROM samples WHERE deployment = ? ORDER BY at, seq"


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
    client_id: str | None = None  # the request's own ``id``, as the client gave it


@dataclass(frozen=True)
class Feedback:
    """A label for one served request, named by the server's ``request_id`` or else by the
    client's own ``id`` (the newest sample with that id)."""

    label: int
    request_id: str | None = None
    client_id: str | None = None

    @property
    def ref(self) -> str:
        return self.request_id if self.request_id is not None else f"id {self.client_id}"


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
    client_id: str | None = None  # the request's own ``id``, as the client gave it


@dataclass(frozen=True)
class Usage:
    samples: int
    bytes: int
    appended: int
    evicted: int


def sample_store_path(data_dir: Path) -> Path:
    return Path(data_dir) / SAMPLES_FILE


class SampleStore:
    """The sample store in one SQLite file (module docstring). Thread-safe: one connection
    per thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        private_folder(self.path.parent, FOLDER_MODE)
        # SQLite gives its -wal and -shm files the database file's mode: create it 0600
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))
        for existing in (self.path, *self._side_files()):  # (a store from before: 0644)
            with contextlib.suppress(FileNotFoundError):
                os.chmod(existing, FILE_MODE)
        self._local = threading.local()
        # (each statement commits by itself)
        self._connection().executescript(_SCHEMA + at_ingress.SCHEMA)
        self._migrate()

    def _side_files(self) -> tuple[Path, Path]:
        return (self.path.with_name(self.path.name + "-wal"),
                self.path.with_name(self.path.name + "-shm"))  # fmt: skip

    def _migrate(self) -> None:
        """Bring a store written by an older deepedge up to this schema (once, whichever
        process opens it first)."""
        with self._transaction() as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(samples)")}
            if "client_id" not in columns:
                conn.execute("ALTER TABLE samples ADD COLUMN client_id TEXT")
            columns = {row[1] for row in conn.execute("PRAGMA table_info(traffic)")}
            if "failed_ms_sum" not in columns:
                conn.execute("ALTER TABLE traffic ADD COLUMN failed_ms_sum REAL NOT NULL DEFAULT 0")
            conn.execute(_CLIENT_ID_INDEX)

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
        evicted. Once this returns, every sample of ``samples`` is durable. Samples of a
        deleted deployment (:meth:`delete_deployment`; late arrivals from requests still
        in flight) are dropped."""
        now = time.time() if now is None else now
        rows = [
            (
                deployment, s.request_id, s.at, s.version, s.route.value, s.prediction,
                s.input.dtype.str, json.dumps(list(s.input.shape)),
                np.ascontiguousarray(s.input).tobytes(), s.input.nbytes, s.client_id,
            )
            for s in samples
        ]  # fmt: skip
        added = added_bytes = 0
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM deleted WHERE deployment = ?", (deployment,)).fetchone():
                return 0
            for row in rows:
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO samples (deployment, request_id, at, version, route, "
                    "prediction, dtype, shape, input, bytes, client_id) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
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
            # oldest first, in the (deployment, at) index's own order (ties by seq): the scan
            # stops at the last sample evicted. Ordered by seq, every append past the cap
            # sorted the deployment's whole store first (20,000 rows, about 14 ms), and at
            # 60 sampled requests a second the data plane fell minutes behind its camera.
            for seq, at, row_bytes in conn.execute(OLDEST_FIRST, (deployment,)):
                if samples <= retention.max_samples and size <= retention.max_bytes:
                    break
                last = (at, seq)
                samples, size = samples - 1, size - row_bytes
                count, nbytes = count + 1, nbytes + row_bytes
            if last is not None:
                conn.execute(
                    "DELETE FROM samples WHERE deployment = ? "
                    "AND (at < ? OR (at = ? AND seq <= ?))",
                    (deployment, last[0], last[0], last[1]),
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

    def label_batch(
        self, deployment: str, labels: Sequence[Feedback], source: str, now: float | None = None
    ) -> list[str]:
        """Label every sample ``labels`` names, all or nothing, in one transaction: the refs
        (:attr:`Feedback.ref`) of those that name no stored sample (unknown, not sampled,
        or evicted); when there is any, nothing is written. A feedback label is never
        replaced by another source's."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            targets: list[tuple[int, int]] = []
            unknown: list[str] = []
            for entry in labels:
                if entry.request_id is not None:
                    row = conn.execute(
                        "SELECT seq, label_source FROM samples WHERE deployment = ? AND "
                        "request_id = ?",
                        (deployment, entry.request_id),
                    ).fetchone()
                else:
                    row = conn.execute(
                        "SELECT seq, label_source FROM samples WHERE deployment = ? AND "
                        "client_id = ? ORDER BY seq DESC LIMIT 1",
                        (deployment, entry.client_id),
                    ).fetchone()
                if row is None:
                    unknown.append(entry.ref)
                elif not (row[1] == FEEDBACK and source != FEEDBACK):
                    targets.append((row[0], entry.label))
            if unknown:
                return unknown
            conn.executemany(
                "UPDATE samples SET label = ?, label_source = ?, labelled_at = ? WHERE seq = ?",
                [(int(label), source, now, seq) for seq, label in targets],
            )
        return []

    @contextlib.contextmanager
    def _erasing(self) -> Iterator[sqlite3.Connection]:
        """A transaction whose removed rows are overwritten in the file (``secure_delete``),
        committed with a full sync; then the write-ahead log that still held them is
        checkpointed and truncated, when no reader holds it."""
        conn = self._connection()
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA synchronous=FULL")
        try:
            with self._transaction() as conn:
                yield conn
        finally:
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA secure_delete=OFF")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # (busy with a reader: no harm)

    def delete_deployment(self, deployment: str, now: float | None = None) -> int:
        """Remove every sample, count and traffic row of ``deployment`` and refuse its
        samples from now on (a request still in flight may append after this), in one
        erasing transaction (:meth:`_erasing`). Returns the number of samples removed (0
        when deleted before)."""
        now = time.time() if now is None else now
        with self._erasing() as conn:
            n = conn.execute("DELETE FROM samples WHERE deployment = ?", (deployment,)).rowcount
            conn.execute("DELETE FROM usage WHERE deployment = ?", (deployment,))
            conn.execute("DELETE FROM traffic WHERE deployment = ?", (deployment,))
            conn.execute(
                "INSERT INTO deleted (deployment, at, samples) VALUES (?,?,?) ON CONFLICT "
                "(deployment) DO UPDATE SET samples = samples + excluded.samples",
                (deployment, now, n),
            )
        return int(n)

    def delete_samples(self, deployment: str, selection: SampleSelection) -> DeletedSamples:
        """Remove the samples of ``deployment`` that ``selection`` names (the deployment
        stays, and keeps taking samples), in one erasing transaction (:meth:`_erasing`);
        its stored count and bytes go down by what was removed."""
        with self._erasing() as conn:
            return selected.delete(conn, deployment, selection)

    def deleted(self, deployment: str) -> int | None:
        """How many samples :meth:`delete_deployment` removed (None: never deleted)."""
        row = (
            self._connection()
            .execute("SELECT samples FROM deleted WHERE deployment = ?", (deployment,))
            .fetchone()
        )
        return None if row is None else int(row[0])

    def record_traffic(self, rows: Sequence[TrafficRow], keep_s: float = KEEP_S) -> None:
        """Add replicas' per-second traffic (:func:`deepedge.dataplane.traffic.record`)."""
        if rows:
            with self._transaction() as conn:
                figures.record(conn, rows, keep_s)

    def record_ingress(self, rows: Sequence[IngressRow], covered: Sequence[int],
                       keep_s: float = KEEP_S) -> None:  # fmt: skip
        """Add the ingress's per-second figures and the seconds they cover
        (:func:`deepedge.dataplane.ingress_traffic.record`)."""
        if rows or covered:
            with self._transaction() as conn:
                at_ingress.record(conn, rows, covered, keep_s)

    # -- reading --------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A connection of its own in one read transaction: every query on it sees the store
        as its first query found it, whatever is appended, evicted or deleted meanwhile.
        Any thread may use it, one at a time (a streamed answer is read on whichever of the
        server's worker threads asks for its next part)."""
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)  # fmt: skip
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("BEGIN")
            yield conn
        finally:
            conn.close()  # (the read transaction ends with it)

    _COLUMNS = (
        "request_id, at, version, route, prediction, dtype, shape, input, label, label_source, "
        "client_id"
    )

    @staticmethod
    def _decode(row: tuple[Any, ...]) -> StoredSample:
        rid, at, version, route, prediction, dtype, shape, blob, label, source, client = row
        array = np.frombuffer(blob, dtype=np.dtype(dtype)).reshape(json.loads(shape))
        return StoredSample(rid, at, version, RouteKind(route), prediction, array, label, source,
                            client)  # fmt: skip

    def window(self, deployment: str, start: float, end: float) -> list[StoredSample]:
        """The samples served in ``[start, end)``, oldest first."""
        return self._served(deployment, start, end)

    def labelled_late(
        self, deployment: str, start: float, end: float, since: float
    ) -> list[StoredSample]:
        """The samples served in ``[start, end)`` whose application feedback
        (:data:`FEEDBACK`) arrived after ``since``, oldest first: labels that came after
        the window they were served in had closed."""
        also = "AND label_source = ? AND labelled_at > ? "
        return self._served(deployment, start, end, also, (FEEDBACK, since))

    def _served(self, deployment: str, start: float, end: float, also: str = "",
                values: tuple[Any, ...] = ()) -> list[StoredSample]:  # fmt: skip
        """The samples served in ``[start, end)`` that ``also`` admits, oldest first."""
        rows = (
            self._connection()
            .execute(
                f"SELECT {self._COLUMNS} FROM samples WHERE deployment = ? AND at >= ? AND at < ? "
                f"{also}ORDER BY at, seq",
                (deployment, start, end, *values),
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

    def label_sources(self, deployment: str) -> dict[str, int]:
        """How many of the deployment's stored samples carry a label, by its source
        (:data:`GOLDEN`, :data:`FEEDBACK`, ...)."""
        rows = (
            self._connection()
            .execute(
                "SELECT label_source, COUNT(*) FROM samples WHERE deployment = ? "
                "AND label IS NOT NULL GROUP BY label_source",
                (deployment,),
            )
            .fetchall()
        )
        return {str(source): int(n) for source, n in rows}

    def all_usage(self) -> dict[str, Usage]:
        rows = (
            self._connection()
            .execute("SELECT deployment, samples, bytes, appended, evicted FROM usage")
            .fetchall()
        )
        return {row[0]: Usage(*row[1:]) for row in rows}

    def traffic_totals(self, deployment: str) -> TrafficTotals:
        """Everything the kept per-second figures of ``deployment`` add up to."""
        return figures.totals(self._connection(), deployment)

    def traffic(self, deployment: str, now: float, span_s: float = 10.0) -> TrafficSummary:
        """Requests per second, latency quantiles and the canary's share over the last
        ``span_s`` whole seconds before ``now``."""
        return figures.summary(self._connection(), deployment, now, span_s)

    def ingress_latency(self, model: str, now: float, span_s: float,
                        since_s: float) -> IngressLatency:  # fmt: skip
        """``model``'s latency at the ingress, and how whole its figures are
        (:func:`deepedge.dataplane.ingress_traffic.summary`)."""
        return at_ingress.summary(self._connection(), model, now, span_s, since_s)


FEEDBACK = "feedback"  # a label the application sent for a request
GOLDEN = "golden"  # a label the deployment's golden labeller gave (a uniform draw)
GOLDEN_HARD = "golden-hard"  # the same, for an answer chosen as one of the least sure
GOLDEN_DISCORDANT = "golden-discordant"  # the same, for a request two versions answered apart
CHOSEN_SOURCES = (GOLDEN_HARD, GOLDEN_DISCORDANT)  # labels of samples not drawn uniformly
