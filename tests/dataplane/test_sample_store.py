"""The sample store: durable appends, retention by count, bytes and age (counted, never
refusing), feedback over golden labels, windows by time, traffic summaries."""

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


def test_feedback_labels_win_over_golden_ones(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("d", samples(3), Retention(), now=3.0)
    assert store.label("d", "r0", 7, FEEDBACK)
    store.label_many("d", [("r0", 1), ("r1", 2)], GOLDEN, now=1.0)
    assert not store.label("d", "nope", 1, FEEDBACK)
    labels = {s.request_id: (s.label, s.label_source) for s in store.window("d", 0.0, 9.0)}
    assert labels == {"r0": (7, FEEDBACK), "r1": (2, GOLDEN), "r2": (None, None)}
    assert store.label("d", "r1", 5, FEEDBACK)  # feedback replaces a golden label
    assert store.get("d", "r1").label == 5  # type: ignore[union-attr]
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
    assert summary.latency_mean_ms == pytest.approx(1500.0 / 250)
    assert summary.latency_p50_ms is not None and 2.0 <= summary.latency_p50_ms <= 5.0
    assert summary.latency_p99_ms is not None and 20.0 <= summary.latency_p99_ms <= 50.0
    assert store.traffic("d", now=10_000.0).requests == 0


def test_quantiles_of_a_latency_histogram() -> None:
    assert quantile(histogram([]), 0.5) is None
    hist = histogram([0.5] * 50 + [7.0] * 50)
    assert quantile(hist, 0.25) == pytest.approx(0.5)  # inside the first bucket (0-1 ms)
    assert 5.0 <= quantile(hist, 0.9) <= 10.0  # type: ignore[operator]
    assert quantile(histogram([1e9]), 0.5) == LATENCY_BUCKETS_MS[-1]
