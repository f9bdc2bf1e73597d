"""Deleting some of a deployment's samples: by request id, by time range or all of them;
counted, durable (gone from the file after reopening it), the others and the other
deployments' kept, and a selection that is malformed refused naming its field."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.core.errors import InvalidInputError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_selection import (
    MAX_REQUEST_IDS,
    DeletedSamples,
    SampleSelection,
    deletion,
)
from deepedge.dataplane.sample_store import Retention, Sample, SampleStore

SIZE = 16  # float32 values per input: 64 bytes


def _samples(n: int, first: int = 0) -> list[Sample]:
    return [Sample(f"r{first + i}", float(first + i), 1, RouteKind.SERVING, 0,
                   np.full((1, SIZE), 1000 + first + i, dtype=np.float32))
            for i in range(n)]  # fmt: skip


def _ids(store: SampleStore, deployment: str) -> list[str]:
    return [s.request_id for s in store.window(deployment, -1e18, 1e18)]


@pytest.mark.parametrize(
    ("selection", "deleted", "kept"),
    [
        (SampleSelection(request_ids=("r1", "r3")), 2, ["r0", "r2", "r4", "r5"]),
        (SampleSelection(since=4.0), 2, ["r0", "r1", "r2", "r3"]),
        (SampleSelection(until=2.0), 2, ["r2", "r3", "r4", "r5"]),
        (SampleSelection(since=1.0, until=3.0), 2, ["r0", "r3", "r4", "r5"]),  # [since, until)
        (SampleSelection(), 6, []),
        (SampleSelection(since=100.0), 0, [f"r{i}" for i in range(6)]),
    ],
)  # fmt: skip
def test_a_deletion_removes_what_it_names_counts_it_and_keeps_the_rest(
    tmp_path: Path, selection: SampleSelection, deleted: int, kept: list[str]
) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("cam", _samples(6), Retention(), now=6.0)
    store.append("door", _samples(6), Retention(), now=6.0)  # the same ids and times
    gone = store.delete_samples("cam", selection)
    assert gone == DeletedSamples(deleted, deleted * SIZE * 4)
    reopened = SampleStore(tmp_path / "s.db")  # (another process's view)
    assert _ids(reopened, "cam") == kept
    assert _ids(reopened, "door") == [f"r{i}" for i in range(6)]
    usage = reopened.usage("cam")
    assert (usage.samples, usage.bytes, usage.appended) == (6 - deleted, (6 - deleted) * 64, 6)


def test_ids_that_name_no_sample_are_listed_and_nothing_else_goes(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("cam", _samples(3), Retention(), now=3.0)
    store.append("door", _samples(1, first=7), Retention(), now=3.0)
    gone = store.delete_samples("cam", SampleSelection(request_ids=("r2", "nope", "r7")))
    assert (gone.count, gone.not_found) == (1, ("nope", "r7"))  # r7 is door's, not cam's
    assert _ids(store, "door") == ["r7"]
    again = store.delete_samples("cam", SampleSelection(request_ids=("r2",)))
    assert (again.count, again.not_found) == (0, ("r2",))


def test_a_long_list_of_ids_is_deleted_in_one_go(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("cam", _samples(1500), Retention(), now=1500.0)
    ids = tuple(f"r{i}" for i in range(0, 1500, 2))  # past any limit of bound variables
    assert store.delete_samples("cam", SampleSelection(request_ids=ids)).count == 750
    assert _ids(store, "cam") == [f"r{i}" for i in range(1, 1500, 2)]


def test_deleted_inputs_are_gone_from_the_file_and_the_deployment_keeps_sampling(
    tmp_path: Path,
) -> None:
    store = SampleStore(tmp_path / "s.db")
    store.append("cam", _samples(4), Retention(), now=4.0)
    marker = np.full((1, SIZE), 1002, dtype=np.float32).tobytes()  # r2's input, only r2's
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert marker in raw
    assert store.delete_samples("cam", SampleSelection(request_ids=("r2",))).count == 1
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    assert marker not in raw
    assert store.delete_samples("cam", SampleSelection()).count == 3
    assert store.deleted("cam") is None  # (not a deleted deployment: it keeps sampling)
    store.append("cam", _samples(2, first=10), Retention(), now=12.0)
    assert _ids(store, "cam") == ["r10", "r11"] and store.usage("cam").samples == 2


@settings(max_examples=30, deadline=None)
@given(
    times=st.lists(st.integers(0, 50), min_size=0, max_size=25),
    since=st.none() | st.integers(0, 50),
    span=st.none() | st.integers(0, 50),
)
def test_a_range_deletion_leaves_exactly_the_samples_outside_it(
    tmp_path_factory: pytest.TempPathFactory,
    times: list[int],
    since: int | None,
    span: int | None,
) -> None:
    store = SampleStore(tmp_path_factory.mktemp("s") / "s.db")
    samples = [Sample(f"r{i}", float(t), 1, RouteKind.SERVING, 0, np.zeros(2, np.float32))
               for i, t in enumerate(times)]  # fmt: skip
    store.append("cam", samples, Retention(max_age_s=1e9), now=60.0)
    until = None if span is None else (since or 0) + span
    gone = store.delete_samples("cam", SampleSelection(since, until))

    def inside(t: float) -> bool:
        return (since is None or t >= since) and (until is None or t < until)

    assert gone.count == sum(inside(t) for t in times)
    left = store.window("cam", -1.0, 1e9)
    assert sorted(s.request_id for s in left) == sorted(
        s.request_id for s in samples if not inside(s.at)
    )
    assert store.usage("cam").samples == len(left)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: SampleSelection(since=5.0, until=1.0), "until"),
        (lambda: SampleSelection(since=math.nan), "since"),
        (lambda: SampleSelection(until=math.inf), "until"),
        (lambda: SampleSelection(since=-math.inf), "since"),
        (lambda: SampleSelection(request_ids=()), "request_ids"),
        (lambda: SampleSelection(request_ids=("r1", "")), "request_ids.1"),
        (lambda: SampleSelection(request_ids=("x" * 129,)), "request_ids.0"),
        (lambda: SampleSelection(request_ids=("r",) * (MAX_REQUEST_IDS + 1)), "request_ids"),
        (lambda: deletion(None, None, None, False), "all"),  # names nothing: never everything
        (lambda: deletion(["r1"], 1.0, None, False), "<body>"),
        (lambda: deletion(None, 1.0, None, True), "<body>"),
        (lambda: deletion([], None, None, False), "request_ids"),
    ],
)  # fmt: skip
def test_a_malformed_selection_is_refused_naming_its_field(
    make: Callable[[], object], field: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        make()
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((["a", "b", "a"], None, None, False), SampleSelection(request_ids=("a", "b"))),
        ((None, 1.0, None, False), SampleSelection(since=1.0)),
        ((None, None, 2.0, False), SampleSelection(until=2.0)),
        ((None, None, None, True), SampleSelection()),
    ],
)  # fmt: skip
def test_a_deletion_names_ids_a_range_or_all(
    args: tuple[list[str] | None, float | None, float | None, bool], expected: SampleSelection
) -> None:
    assert deletion(*args) == expected
