"""A deployment's samples as an NPZ archive: read back by numpy as they were stored, from
one snapshot, in a time range, never with another deployment's."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_export import NO_LABEL, SampleExport, export_bytes
from deepedge.dataplane.sample_selection import SampleSelection
from deepedge.dataplane.sample_store import FEEDBACK, GOLDEN, Retention, Sample, SampleStore


def _images(n: int, first: int = 0) -> list[Sample]:
    rng = np.random.default_rng(first)
    return [
        Sample(f"r{first + i}", float(first + i), 1 + i % 2,
               RouteKind.CANARY if i % 3 == 0 else RouteKind.SERVING, i % 10,
               rng.normal(size=(1, 8, 8)).astype(np.float32),
               client_id=f"cam-{first + i}" if i % 2 else None)
        for i in range(n)
    ]  # fmt: skip


def _read(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.fixture
def store(tmp_path: Path) -> SampleStore:
    store = SampleStore(tmp_path / "s.db")
    store.append("cam", _images(6), Retention(), now=10.0)
    store.append("door", _images(4, first=100), Retention(), now=10.0)  # another deployment
    store.label("cam", "r1", 7, FEEDBACK, now=20.0)
    store.label("cam", "r4", 3, GOLDEN, now=21.0)
    return store


def test_an_export_reads_back_as_it_was_stored(store: SampleStore) -> None:
    got = _read(export_bytes(store, "cam", SampleSelection()))
    stored = store.window("cam", 0.0, 1e9)
    assert list(got["request_id"]) == [s.request_id for s in stored] == [f"r{i}" for i in range(6)]
    assert got["inputs"].dtype == np.float32 and got["inputs"].shape == (6, 1, 8, 8)
    np.testing.assert_array_equal(got["inputs"], np.stack([s.input for s in stored]))
    assert list(got["label"]) == [NO_LABEL, 7, NO_LABEL, NO_LABEL, 3, NO_LABEL]
    assert list(got["label_source"]) == ["", FEEDBACK, "", "", GOLDEN, ""]
    assert got["labelled_at"][1] == 20.0 and np.isnan(got["labelled_at"][0])
    assert list(got["at"]) == [s.at for s in stored]
    assert list(got["version"]) == [s.version for s in stored]
    assert list(got["route"]) == [s.route.value for s in stored]
    assert list(got["prediction"]) == [s.prediction for s in stored]
    assert list(got["client_id"]) == [s.client_id or "" for s in stored]


@pytest.mark.parametrize(
    ("deployment", "selection", "ids"),
    [
        ("cam", SampleSelection(since=2.0), ["r2", "r3", "r4", "r5"]),
        ("cam", SampleSelection(until=2.0), ["r0", "r1"]),  # [since, until)
        ("cam", SampleSelection(since=1.0, until=4.0), ["r1", "r2", "r3"]),
        ("cam", SampleSelection(since=3.0, until=3.0), []),
        ("door", SampleSelection(), ["r100", "r101", "r102", "r103"]),
        ("door", SampleSelection(until=50.0), []),  # cam's times, door's none
        ("gone", SampleSelection(), []),
    ],
)  # fmt: skip
def test_an_export_holds_its_deployments_samples_in_its_range_only(
    store: SampleStore, deployment: str, selection: SampleSelection, ids: list[str]
) -> None:
    export = SampleExport(store, deployment, selection)
    assert export.count == len(ids)
    got = _read(b"".join(export.chunks()))
    assert list(got["request_id"]) == ids
    assert got["inputs"].shape[0] == len(ids) == len(got["label"]) == len(got["at"])


def test_an_export_is_one_snapshot_whatever_is_written_meanwhile(store: SampleStore) -> None:
    export = SampleExport(store, "cam", SampleSelection())
    store.append("cam", _images(3, first=6), Retention(), now=10.0)
    store.label("cam", "r0", 9, FEEDBACK, now=22.0)
    got = _read(b"".join(export.chunks(chunk_bytes=64)))  # (small parts: many yields)
    assert export.count == len(got["request_id"]) == len(got["inputs"]) == 6
    assert got["label"][0] == NO_LABEL
    assert SampleExport(store, "cam", SampleSelection()).count == 9


def test_inputs_of_several_shapes_are_an_array_each(tmp_path: Path) -> None:
    store = SampleStore(tmp_path / "s.db")
    wide = np.arange(6, dtype=np.uint8).reshape(2, 3)
    store.append("cam", [Sample("a", 1.0, 1, RouteKind.SERVING, 0, np.ones(4, np.float32)),
                         Sample("b", 2.0, 1, RouteKind.SERVING, 1, wide)],
                 Retention(), now=3.0)  # fmt: skip
    got = _read(export_bytes(store, "cam", SampleSelection()))
    assert "inputs" not in got
    np.testing.assert_array_equal(got["input_0"], np.ones(4, np.float32))
    np.testing.assert_array_equal(got["input_1"], wide)
    assert got["input_1"].dtype == np.uint8


def test_the_archive_is_a_valid_zip_and_needs_no_pickle(store: SampleStore) -> None:
    data = export_bytes(store, "cam", SampleSelection())
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert "inputs.npy" in archive.namelist()
    assert all(a.dtype != object for a in _read(data).values())
