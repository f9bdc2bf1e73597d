"""Tabular workloads: CSV and Parquet windows, column types, normalisation fitted on the first
windows, text or integer labels through a class list, bad rows skipped and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.workload.resolve import load_workload

MLP = {"entry_point": "deepedge.learning.small_models:make_mlp",
       "kwargs": {"n_features": 5, "n_classes": 2, "hidden": [8]}}  # fmt: skip


def _rows(hours: int = 3, per_hour: int = 40, seed: int = 0) -> list[dict[str, Any]]:
    """Two numeric columns (x drifts by +10 from hour 2), one categorical (site a/b), a
    text label that is 'high' when x + y > 0, an ISO timestamp."""
    rng = np.random.default_rng(seed)
    rows = []
    for h in range(hours):
        for i in range(per_hour):
            x, y = rng.normal(), rng.normal()
            rows.append(
                {
                    "time": f"2026-11-25T{8 + h:02d}:{i:02d}:00",
                    "x": x + 10.0 * (h >= 2),
                    "y": y,
                    "site": "ab"[i % 2],
                    "label": "high" if x + y > 0 else "low",
                }
            )
    return rows  # fmt: skip


def _write(tmp_path: Path, rows: list[dict[str, Any]], data: dict[str, Any], **extra: Any) -> Path:
    import pandas as pd

    folder = tmp_path / "hours"
    folder.mkdir(exist_ok=True)
    frame = pd.DataFrame(rows)
    for hour, part in frame.groupby(frame["time"].str[:13]):
        part.to_csv(folder / f"{hour}.csv", index=False)
    table = {"kind": "table", "path": "hours", "timestamp": "time", "window_s": 3600, **data}
    doc = {"name": "table", "model": MLP, "data": table, **extra}
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(doc))
    return path


def test_hourly_csv_files_become_windows_of_encoded_rows(tmp_path: Path) -> None:
    workload = load_workload(_write(tmp_path, _rows(), {"fit_windows": 2}))
    assert workload.source.n_windows == 3 and workload.class_names == ("high", "low")
    assert workload.input_shape == (5,)  # x, y, then site a/b/(other) one-hot
    assert workload.spec.input.kind == "features"
    first = workload.window(0)
    assert first.images.shape[1] == 5 and len(first.labels) + len(first.eval_labels) == 40
    fitted = {c["column"]: c for c in workload.source.fitted()}  # type: ignore[attr-defined]
    assert fitted["site"]["categories"] == ["a", "b"] and fitted["x"]["type"] == "numeric"
    # standardised on the first two hours: about mean 0 there, +10 std later
    x = list(fitted).index("x")  # the vector's slots follow the columns: x, y, site
    early = np.concatenate([workload.window(t).images for t in (0, 1)])
    assert abs(early[:, x].mean()) < 0.3
    assert workload.window(2).images[:, x].mean() > 5.0
    assert workload.window(2).severity > 0.8 and workload.window(1).severity < 0.3
    assert any("moved from the first 2 window(s)" in w for w in workload.warnings)


def test_a_parquet_file_and_integer_labels_sorted_as_numbers(tmp_path: Path) -> None:
    import pandas as pd

    rows = _rows(hours=2)
    frame = pd.DataFrame(rows)
    frame["label"] = [10 if r["label"] == "high" else 2 for r in rows]
    frame["t"] = pd.to_datetime(frame.pop("time")).astype("int64") // 10**9
    frame.to_parquet(tmp_path / "rows.parquet")
    doc = {"model": MLP, "data": {"kind": "table", "path": "rows.parquet", "timestamp": "t"}}
    (tmp_path / "w.json").write_text(json.dumps(doc))
    workload = load_workload(tmp_path / "w.json")
    assert workload.class_names == ("2", "10")  # numeric order, not text order
    window = workload.window(0)
    assert set(window.labels.tolist()) | set(window.eval_labels.tolist()) == {0, 1}


@pytest.mark.parametrize("bad", [1, 4])
def test_bad_rows_are_skipped_and_counted_or_fail_past_the_threshold(
    tmp_path: Path, bad: int
) -> None:
    rows = _rows(hours=2)
    for r in rows[:bad]:
        r["y"] = "n/a"  # not a number
    path = _write(tmp_path, rows, {"max_bad_fraction": 0.05})
    if bad == 1:
        workload = load_workload(path)
        window = workload.window(0)
        assert len(window.skipped) == 1 and "'n/a', not a number" in window.skipped[0].reason
        assert "line 2" in window.skipped[0].where
        assert len(window.labels) + len(window.eval_labels) == 39
        assert any("bad sample" in w for w in workload.warnings)
        return
    with pytest.raises(InvalidInputError, match="4 of 40 samples are bad") as info:
        load_workload(path)
    assert info.value.field == "data"


@pytest.mark.parametrize(
    ("data", "extra", "field", "message"),
    [
        ({"label": "diagnosis"}, {}, "data.label", "no column 'diagnosis'"),
        ({"timestamp": "when"}, {}, "data.timestamp", "no column 'when'"),
        ({"timestamp": "site"}, {}, "data.timestamp", "no value of column 'site' is a time"),
        ({"features": [{"name": "z"}]}, {}, "data.features", "no column(s) ['z']"),
        ({}, {"classes": ["high", "medium"]}, "data", "'low' is not one of the classes"),
        ({}, {"model": {**MLP, "kwargs": {"n_features": 4, "n_classes": 2}}}, "input",
         "the table's 5 encoded features"),
        ({}, {"model": {**MLP, "kwargs": {"n_features": 5, "n_classes": 3}}}, "classes",
         "outputs 3 scores but the data has 2 classes"),
    ],
)  # fmt: skip
def test_a_bad_table_names_its_field(
    tmp_path: Path, data: dict[str, Any], extra: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidInputError) as info:
        load_workload(_write(tmp_path, _rows(hours=2), data, **extra))
    assert info.value.field == field
    assert message in info.value.message


def test_the_bundled_reference_table() -> None:
    workload = load_workload("cancer-table")
    assert workload.class_names == ("benign", "malignant") and workload.input_shape == (34,)
    assert workload.source.n_windows == 8
    assert workload.window(0).severity == 0.0 and workload.window(6).severity > 0.8
