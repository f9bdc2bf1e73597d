"""The sample store: durable appends, retention by count, bytes and age (counted, never
refusing), feedback over golden labels (a batch all or nothing), windows by time, traffic
summaries and totals, deletion for good, and files only the service's user reads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import (
    FEEDBACK,
    GOLDEN,
    LATENCY_BUCKETS_MS,
    Feedback,
    Retention,
    Sample,
    SampleStore,
    TrafficRow,
    histogram,
    quantile,
)


def samples(n: int, start: float = 0.0, size: int = 16, first: int = 0) -> list[Sample]:
    return [
        Sample(f"r{first + i}", start + i, 1, RouteKind.SERVING, i % 10,
               np.full((1, size), i, dtype=np.float32))
        for i in range(n)
    ]  # fmt: skip


def test_appends_round_trip_and_a_replayed_request_is_kept_once(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    assert store.append("d", samples(5), Retention(), now=10.0) == 0
    assert store.append("d", samples(5), Retention(), now=10.0) == 0  # the same ids again
    got = store.window("d", 0.0, 10.0)
    assert [s.request_id for s in got] == [f"r{i}" for i in range(5)]
    np.testing.assert_array_equal(got[3].input, np.full((1, 16), 3, dtype=np.float32))
    assert got[3].route is RouteKind.SERVING and got[3].prediction == 3
    assert store.usage("d").samples == 5 and store.usage("d").bytes == 5 * 64
    assert store.window("d", 1.0, 3.0)[0].request_id == "r1"  # [start, end)
    assert len(store.window("d", 1.0, 3.0)) == 2
    assert store.window("other", 0.0, 10.0) == []


@pytest.mark.parametrize(
    ("retention", "kept", "evicted"),
    [
        (Retention(max_samples=6), 6, 4),
        (Retention(max_bytes=64 * 3), 3, 7),
        (Retention(max_age_s=4.5), 5, 5),  # now = 9: at < 4.5 goes
        (Retention(max_samples=100), 10, 0),
    ],
)
def test_retention_evicts_the_oldest_and_counts_them(
    tmp_path: Path, retention: Retention, kept: int, evicted: int
) -> None:
    store = SampleStore(tmp_path / "s.db")
    assert store.append("d", samples(10), retention, now=9.0) == evicted
    left = store.window("d", 0.0, 100.0)
    assert [s.request_id for s in left] == [f"r{i}" for i in range(10 - kept, 10)]
    usage = store.usage("d")
    assert (usage.samples, usage.evicted, usage.appended) == (kept, evicted, 10)
    assert usage.bytes == kept * 64


def test_a_full_store_keeps_taking_samples(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    for k in range(5):
        store.append("d", samples(10, start=10.0 * k, first=10 * k), Retention(max_samples=10),
                     now=50.0)  # fmt: skip
    assert store.usage("d").samples == 10 and store.usage("d").evicted == 40
    assert store.window("d", 0.0, 100.0)[0].request_id == "r40"


def test_the_oldest_served_goes_first_and_ties_go_in_append_order(tmp_path: Path) -> None:
    """A request served earlier but appended later (a replica's batch that came late) is
    older: it goes before samples appended ahead of it."""
    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(4, start=10.0), Retention(), now=20.0)  # r0-r3 at 10-13
    late = [Sample("late", 5.0, 1, RouteKind.SERVING, 0, np.zeros((1, 16), np.float32)),
            Sample("tie", 10.0, 1, RouteKind.SERVING, 0, np.zeros((1, 16), np.float32))]
    assert store.append("d", late, Retention(max_samples=4), now=20.0) == 2
    assert [s.request_id for s in store.window("d", 0.0, 100.0)] == ["tie", "r1", "r2", "r3"]
    assert store.usage("d").samples == 4


def test_an_append_past_the_cap_reads_only_what_it_evicts(tmp_path: Path) -> None:
    """Eviction walks the (deployment, at) index from the oldest and stops: its query plan
    sorts nothing (ordered by seq, every append past a cap of 20,000 sorted the whole
    store, and the data plane fell minutes behind its camera)."""
    import sqlite3

    from deepedge.dataplane.sample_store import OLDEST_FIRST

    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(3), Retention(), now=3.0)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        plan = " ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {OLDEST_FIRST}",
                                                              ("d",)))  # fmt: skip
    assert "samples_time" in plan and "TEMP B-TREE" not in plan


def test_feedback_labels_win_over_golden_ones(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(3), Retention(), now=3.0)
    assert store.label("d", "r0", 7, FEEDBACK)
    store.label_many("d", [("r0", 1), ("r1", 2)], GOLDEN, now=1.0)
    assert not store.label("d", "nope", 1, FEEDBACK)
    labels = {s.request_id: (s.label, s.label_source) for s in store.window("d", 0.0, 9.0)}
    assert labels == {"r0": (7, FEEDBACK), "r1": (2, GOLDEN), "r2": (None, None)}
    assert store.label_sources("d") == {FEEDBACK: 1, GOLDEN: 1}  # r2 has no label
    assert store.label("d", "r1", 5, FEEDBACK)  # feedback replaces a golden label
    assert store.get("d", "r1").label == 5  # type: ignore[union-attr]
    assert store.label_sources("d") == {FEEDBACK: 2} and store.label_sources("other") == {}
    assert store.delete_deployment("d") == 3 and store.usage("d").samples == 0


def test_an_acknowledged_append_survives_a_kill_9_of_its_writer(tmp_path: Path) -> None:
    """A child process appends, says so, and is killed at once: the sample is there."""
    path = tmp_path / "s.db"
    child = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np
        from deepedge.dataplane.routing import RouteKind
        from deepedge.dataplane.sample_store import Retention, Sample, SampleStore
        store = SampleStore({str(path)!r})
        store.append("d", [Sample("acked", 1.0, 1, RouteKind.CANARY, 2,
                                  np.ones((3, 4, 4), np.float32))], Retention(), now=1.0)
        sys.stdout.write("acked\\n"); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.stdout.strip() == "acked" and done.returncode == -9
    (kept,) = SampleStore(path).window("d", 0.0, 2.0)
    assert kept.request_id == "acked" and kept.route is RouteKind.CANARY
    assert kept.input.shape == (3, 4, 4)


def test_traffic_adds_up_per_second_and_summarises(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    hist = histogram([3.0] * 90 + [40.0] * 10)
    row = TrafficRow("d", 100, "a", 100, 20, 10, 1, 100, 700.0, hist)
    store.record_traffic([row, TrafficRow("d", 100, "a", 100, 20, 10, 1, 100, 700.0, hist),
                          TrafficRow("d", 101, "b", 50, 0, 0, 0, 50, 100.0,
                                     histogram([2.0] * 50))])  # fmt: skip
    summary = store.traffic("d", now=102.5, span_s=5.0)
    assert summary.requests == 250 and summary.failed == 2
    assert summary.rps == pytest.approx(50.0)
    assert summary.canary_share == pytest.approx(40 / 230)
    latency = summary.latency
    assert latency.requests == 250 and latency.mean_ms == pytest.approx(1500.0 / 250)
    assert latency.p50_ms is not None and 2.0 <= latency.p50_ms <= 5.0
    assert latency.p95_ms is not None and 5.0 <= latency.p95_ms <= 50.0
    assert latency.p99_ms is not None and 20.0 <= latency.p99_ms <= 50.0
    assert latency.p50_ms <= latency.p95_ms <= latency.p99_ms
    assert store.traffic("d", now=10_000.0).requests == 0


def test_quantiles_of_a_latency_histogram() -> None:
    assert quantile(histogram([]), 0.5) is None
    hist = histogram([0.5] * 50 + [7.0] * 50)
    assert quantile(hist, 0.25) == pytest.approx(0.25)  # inside the first bucket (0-0.5 ms)
    assert quantile(hist, 0.9) == pytest.approx(6.5 + 40 / 50)  # (6.5-7.5 ms: 7.0's bucket)
    assert quantile(histogram([1e9]), 0.5) == LATENCY_BUCKETS_MS[-1]


def _labels(store: SampleStore) -> dict[str, int | None]:
    return {s.request_id: s.label for s in store.window("d", 0.0, 1e9)}


@pytest.mark.parametrize(("batch", "unknown"), [
    ([Feedback(1, request_id="r0"), Feedback(2, request_id="nope")], ["nope"]),
    ([Feedback(1, request_id="r0"), Feedback(2, client_id="cam-9")], ["id cam-9"]),
    ([Feedback(1, request_id="x"), Feedback(2, request_id="r1"), Feedback(3, client_id="y")],
     ["x", "id y"]),
])  # fmt: skip
def test_a_feedback_batch_with_an_unknown_id_writes_nothing(
    tmp_path: Path, batch: list[Feedback], unknown: list[str]
) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(3), Retention(), now=3.0)
    assert store.label_batch("d", batch, FEEDBACK) == unknown
    assert _labels(store) == {"r0": None, "r1": None, "r2": None}


def test_a_feedback_batch_names_samples_by_either_id_and_is_written_whole(
    tmp_path: Path,
) -> None:
    store = SampleStore(tmp_path / "s.db")
    tagged = [Sample(f"r{i}", float(i), 1, RouteKind.SERVING, 0, np.zeros(2, np.float32),
                     client_id=f"cam-{i % 2}")
              for i in range(4)]  # fmt: skip
    store.append("d", tagged, Retention(), now=4.0)
    store.append("other", samples(1), Retention(), now=4.0)  # another deployment's r0
    batch = [Feedback(5, request_id="r0"), Feedback(6, client_id="cam-1")]
    assert store.label_batch("d", batch, FEEDBACK) == []
    # the client's id names its newest sample (r3 of r1 and r3)
    assert _labels(store) == {"r0": 5, "r1": None, "r2": None, "r3": 6}
    assert [s.client_id for s in store.window("d", 0.0, 1e9)] == ["cam-0", "cam-1"] * 2
    assert store.get("other", "r0").label is None  # type: ignore[union-attr]
    store.label_many("d", [("r0", 1), ("r2", 2)], GOLDEN, now=5.0)
    assert _labels(store) == {"r0": 5, "r1": None, "r2": 2, "r3": 6}  # feedback stays


def test_deleting_a_deployment_removes_its_samples_for_good(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(4), Retention(), now=4.0)
    store.append("keep", samples(2), Retention(), now=4.0)
    store.record_traffic([TrafficRow("d", 1, "a", 1, 0, 0, 0, 1, 1.0, histogram([1.0]))])
    assert store.deleted("d") is None
    assert store.delete_deployment("d") == 4
    assert store.window("d", 0.0, 1e9) == [] and store.usage("d").samples == 0
    assert store.traffic_totals("d").requests == 0
    assert len(store.window("keep", 0.0, 1e9)) == 2
    # a request still in flight when it was deleted: its samples are dropped
    assert store.append("d", samples(3, first=10), Retention(), now=5.0) == 0
    assert store.window("d", 0.0, 1e9) == [] and store.usage("d").samples == 0
    assert store.deleted("d") == 4 and store.delete_deployment("d") == 0
    # durable: another connection (another process's) sees it, and the bytes are gone
    assert SampleStore(tmp_path / "s.db").window("d", 0.0, 1e9) == []
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    marker = np.full((1, 16), 3, dtype=np.float32).tobytes()  # r3's input: only d had it
    assert store.window("keep", 0.0, 1e9)[0].input.tobytes() != marker
    assert marker not in raw


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_store_is_the_service_users_only(tmp_path: Path) -> None:
    folder = tmp_path / "samples"
    store = SampleStore(folder / "samples.db")
    store.append("d", samples(2), Retention(), now=2.0)
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["samples.db", "samples.db-shm", "samples.db-wal"]
    assert {p.name: _mode(p) for p in folder.iterdir()} == dict.fromkeys(files, 0o600)
    assert _mode(folder) == 0o700
    # a store an older deepedge left world-readable is narrowed when opened
    store.close()
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    SampleStore(folder / "samples.db")
    assert _mode(folder) == 0o700
    assert {_mode(p) for p in folder.iterdir()} == {0o600}


def test_a_store_from_before_client_ids_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE samples (seq INTEGER PRIMARY KEY AUTOINCREMENT, deployment TEXT NOT NULL,"
        " request_id TEXT NOT NULL, at REAL NOT NULL, version INTEGER NOT NULL, route TEXT NOT"
        " NULL, prediction INTEGER NOT NULL, dtype TEXT NOT NULL, shape TEXT NOT NULL, input"
        " BLOB NOT NULL, bytes INTEGER NOT NULL, label INTEGER, label_source TEXT, labelled_at"
        " REAL);"
        "CREATE TABLE traffic (deployment TEXT NOT NULL, second INTEGER NOT NULL, replica TEXT"
        " NOT NULL, requests INTEGER NOT NULL, canary INTEGER NOT NULL, pinned INTEGER NOT"
        " NULL, failed INTEGER NOT NULL, images INTEGER NOT NULL, latency_ms_sum REAL NOT NULL,"
        " latency_hist TEXT NOT NULL, PRIMARY KEY (deployment, second, replica));"
        "INSERT INTO traffic VALUES ('d', 5, 'a', 3, 0, 0, 1, 3, 30.0, '[]');"
    )
    old.close()
    store = SampleStore(path)
    tagged = [Sample("r0", 1.0, 1, RouteKind.SERVING, 0, np.zeros(2, np.float32), "cam")]
    store.append("d", tagged, Retention(), now=2.0)
    assert store.label_batch("d", [Feedback(1, client_id="cam")], FEEDBACK) == []
    totals = store.traffic_totals("d")
    assert (totals.requests, totals.failed, totals.failed_ms_sum) == (3, 1, 0.0)
    # a histogram of other buckets (an older deepedge's) is counted, not read as latency
    summary = store.traffic("d", now=6.0, span_s=5.0)
    assert (summary.requests, summary.latency.requests, summary.latency.p50_ms) == (3, 0, None)


def test_traffic_totals_add_up_what_is_kept(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    assert store.traffic_totals("d").last_second is None
    hist = histogram([1.0])
    store.record_traffic([
        TrafficRow("d", 100, "a", 4, 0, 0, 1, 8, 40.0, hist, failed_ms_sum=25.0),
        TrafficRow("d", 100, "a", 2, 0, 0, 1, 2, 10.0, hist, failed_ms_sum=5.0),
        TrafficRow("d", 104, "b", 1, 0, 0, 0, 1, 1.0, hist),
        TrafficRow("e", 104, "b", 9, 0, 0, 0, 9, 9.0, hist),
    ])  # fmt: skip
    totals = store.traffic_totals("d")
    assert (totals.requests, totals.images, totals.failed) == (7, 11, 2)
    assert (totals.latency_ms_sum, totals.failed_ms_sum) == (51.0, 30.0)
    assert (totals.span_s, totals.last_second) == (5.0, 104)
