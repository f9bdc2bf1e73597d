"""The ingress's figures: its log lines parsed, counted per model and second with the seconds
they cover, stored, and summarised with how whole they are."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.dataplane.ingress_traffic import (
    REPORT_LAG_S,
    Coverage,
    IngressCounter,
    IngressRequest,
    parse_line,
)
from deepedge.dataplane.sample_store import SampleStore
from deepedge.dataplane.traffic import quantile


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1700000000123 200 14 POST /v2/models/acme.cam/infer",
         IngressRequest("acme.cam", 1700000000.123, 200, 14.0)),
        ("1700000000123 200 3 POST /v2/models/acme.cam/versions/2/infer\n",
         IngressRequest("acme.cam", 1700000000.123, 200, 3.0)),
        ("1700000000000 503 3016 POST /v2/models/a-b.c_d/infer/",
         IngressRequest("a-b.c_d", 1700000000.0, 503, 3016.0)),
        # not an inference request: metadata, ready, feedback, another method, Serve's routes
        ("1700000000123 200 1 GET /v2/models/acme.cam", None),
        ("1700000000123 200 1 GET /v2/models/acme.cam/infer", None),
        ("1700000000123 200 1 POST /v2/models/acme.cam/feedback", None),
        ("1700000000123 404 0 GET /-/routes", None),
        # refused as the client's error: the replicas do not count it either
        ("1700000000123 401 2 POST /v2/models/acme.cam/infer", None),
        ("1700000000123 413 2 POST /v2/models/acme.cam/infer", None),
        # not HAProxy's line in LOG_FORMAT, or what it logs for a request it could not read
        ("1700000000123 400 0 <BADREQ> <BADREQ>", None),
        ("1700000000123 -1 -1 POST /v2/models/acme.cam/infer", None),
        ("x 200 1 POST /v2/models/acme.cam/infer", None),
        ("1700000000123 200 POST /v2/models/acme.cam/infer", None),
        ("", None),
        ("1700000000123 200 1 POST /v2/models/acme.cam/infer?x", None),
        ("1700000000123 200 1 POST /v2/models/../infer", None),
        ("1700000000123 200 1 POST /v2/models/a%20b/infer", None),
    ],
)  # fmt: skip
def test_a_log_line_is_an_inference_request_or_nothing(
    line: str, expected: IngressRequest | None
) -> None:
    assert parse_line(line) == expected


def _request(model: str, end_s: float, active_ms: float, status: int = 200) -> IngressRequest:
    return IngressRequest(model, end_s, status, active_ms)


def test_the_counter_takes_finished_seconds_and_the_seconds_it_watched() -> None:
    counter = IngressCounter()
    counter.add(_request("a.x", 99.9, 4.0))  # before it listened: counted, not covered
    counter.watch(100.4)  # the first whole second watched is 101
    for end_s, ms, status in ((101.2, 3.0, 200), (101.7, 30.0, 503), (102.5, 8.0, 200)):
        counter.add(_request("a.x", end_s, ms, status))
    counter.add(_request("b.y", 101.5, 1.0))
    rows, covered = counter.take(102.9)  # second 102 is not over
    assert covered == [101]
    by_key = {(r.model, r.second): r for r in rows}
    assert set(by_key) == {("a.x", 99), ("a.x", 101), ("b.y", 101)}
    second = by_key[("a.x", 101)]
    assert (second.requests, second.failed, second.latency_ms_sum) == (2, 1, 33.0)
    assert sum(second.latency_hist) == 2
    # HAProxy exits at 104.5: 102 and 103 were watched whole, 104 was not
    counter.add(_request("a.x", 104.1, 2.0))
    counter.unwatch(104.5)
    rows, covered = counter.take(None)
    assert covered == [102, 103]
    assert sorted((r.second, r.requests) for r in rows) == [(102, 1), (104, 1)]
    assert counter.take(200.0) == ([], [])  # nothing watched after the exit


@given(st.lists(st.tuples(st.sampled_from(["a.x", "b.y"]), st.floats(0.0, 20.0),
                          st.floats(0.0, 20_000.0), st.sampled_from([200, 500, 503])),
                max_size=200),
       st.floats(0.0, 25.0))  # fmt: skip
def test_every_request_counted_is_taken_once(
    requests: list[tuple[str, float, float, int]], cut_s: float
) -> None:
    counter = IngressCounter()
    for model, end_s, ms, status in requests:
        counter.add(_request(model, end_s, ms, status))
    first, _ = counter.take(cut_s)
    rest, _ = counter.take(None)
    assert all(r.second < int(cut_s) for r in first)
    taken = first + rest
    assert sum(r.requests for r in taken) == len(requests)
    assert sum(sum(r.latency_hist) for r in taken) == len(requests)
    assert sum(r.failed for r in taken) == sum(s >= 500 for *_, s in requests)
    assert len({(r.model, r.second) for r in taken}) == len(taken)


NOW = 1000.5  # a summary's span ends REPORT_LAG_S before int(NOW)
END = int(NOW) - REPORT_LAG_S


def _store(tmp_path: Path, covered: range, latencies_ms: list[float]) -> SampleStore:
    store = SampleStore(tmp_path / "s.db")
    counter = IngressCounter()
    counter.watch(covered.start)
    for i, ms in enumerate(latencies_ms):
        counter.add(_request("acme.cam", END - 10 + (i % 10) + 0.5, ms))
    counter.add(_request("other.cam", END - 1.5, 500.0))
    counter.unwatch(covered.stop)
    rows, seconds = counter.take(None)
    store.record_ingress(rows, seconds)
    return store


@pytest.mark.parametrize(
    ("covered", "since_s", "state", "covered_s", "span_s"),
    [
        (range(END - 30, END + 5), 0.0, Coverage.COMPLETE, 10, 10),
        (range(END - 4, END + 5), 0.0, Coverage.PARTIAL, 4, 10),  # HAProxy started again
        (range(END - 30, END - 6), 0.0, Coverage.PARTIAL, 4, 10),  # it stopped
        (range(END - 30, END - 10), 0.0, Coverage.UNAVAILABLE, 0, 10),
        # a deployment created 2.5 s into the span: only its own seconds count
        (range(END - 30, END + 5), END - 7.5, Coverage.COMPLETE, 7, 7),
    ],
)  # fmt: skip
def test_the_summary_says_how_much_of_the_span_its_figures_cover(
    tmp_path: Path, covered: range, since_s: float, state: Coverage, covered_s: int, span_s: int
) -> None:
    latencies = [3.0] * 90 + [40.0] * 10
    summary = _store(tmp_path, covered, latencies).ingress_latency("acme.cam", NOW, 10.0, since_s)
    assert (summary.coverage, summary.covered_s, summary.span_s) == (state, covered_s, span_s)
    document = summary.document()
    assert document["state"] == state.value and "ingress" in str(document["measured"])
    assert bool(document["reason"]) == (state is not Coverage.COMPLETE)
    if state is Coverage.UNAVAILABLE:
        assert document["p50"] is None and document["p99"] is None and document["mean"] is None
        return
    assert summary.latency.requests == 10 * span_s  # (ten a second, covered or not)
    assert summary.latency.p50_ms is not None and 2.0 <= summary.latency.p50_ms <= 5.0
    p99 = summary.latency.p99_ms
    assert p99 is not None and 20.0 <= p99 <= 50.0 and summary.failed == 0


def test_the_summary_adds_up_figures_sent_twice_and_keeps_models_apart(tmp_path: Path) -> None:
    store = _store(tmp_path, range(END - 30, END + 5), [5.0] * 10)
    counter = IngressCounter()
    counter.add(_request("acme.cam", END - 2.5, 5.0, 503))  # a late line of a taken second
    store.record_ingress(*counter.take(None))
    mine = store.ingress_latency("acme.cam", NOW, 10.0, 0.0)
    assert (mine.latency.requests, mine.failed) == (11, 1)
    assert mine.latency.mean_ms == pytest.approx(5.0)
    theirs = store.ingress_latency("other.cam", NOW, 10.0, 0.0)
    assert (theirs.latency.requests, theirs.failed) == (1, 0)
    assert theirs.latency.p50_ms == quantile_of([500.0], 0.5)
    assert store.ingress_latency("nobody.cam", NOW, 10.0, 0.0).latency.requests == 0


def test_figures_older_than_kept_are_forgotten(tmp_path: Path) -> None:
    store = _store(tmp_path, range(END - 30, END + 5), [5.0] * 10)
    counter = IngressCounter()
    counter.watch(END + 100)
    counter.unwatch(END + 102)
    store.record_ingress(*counter.take(None), keep_s=50.0)
    later = store.ingress_latency("acme.cam", NOW, 10.0, 0.0)
    assert (later.coverage, later.latency.requests) == (Coverage.UNAVAILABLE, 0)


def quantile_of(values: list[float], q: float) -> float | None:
    from deepedge.dataplane.traffic import histogram

    return quantile(histogram(values), q)
